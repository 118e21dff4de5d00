"""RewardModel specs fuzzed with hypothesis against the real API server, the operator and KServe.

Every generated object must end in a defined state:

- refused at admission: 422 (400 for a strict-decoding error) with a message that
  names the field to fix; a spec with a mutation the schema must refuse (a value
  out of bounds, of the wrong type, outside an enum or pattern; a required field
  dropped) is refused;
- or admitted, and reconciled by the operator to a Ready condition for the
  object's current generation with a message and a documented reason: one of
  ``api/conditions.py`` (InferenceServiceReady, InvalidSpec, ApplyFailed, ...) or
  one KServe itself wrote on the InferenceService (its failure reasons and its
  component conditions' reasons, e.g. a predictor whose pods cannot be
  scheduled). ``AwaitingKServe`` is the "not yet" state and never counts as an
  end; a status never written for the current generation is a failure.

InvalidSpec is checked against an oracle of this file's own (the host-name length
rule and the runtime, Secret keys and ServiceAccount the spec names, looked up
here): InvalidSpec exactly when the oracle says so, and never with an
InferenceService. Meanwhile the operator keeps running (same process, liveness
answering) and logs no traceback and no unexpected handler error.

Specs are built from the schema (``reward_operator.api.schema.rewardmodel``, the
CRD's one source) by mutating the samples: every node of the spec can be set to a
value the schema allows (each enum value, integer bounds, long strings), to one
it must refuse (bounds +-1, wrong types, over maxLength or maxItems, outside the
pattern), or dropped; domain-aware strategies add odd storage URIs, vLLM
arguments, environment variables and references to objects that do or do not
exist; names probe the 45-character rule and KServe's 63-character host labels.

The specs are generated up front (hypothesis's generate phase only: shrinking
against a cluster would take hours), created concurrently in batches of
``FUZZ_BATCH`` in a fresh namespace each, and waited for together with one list
per poll. ``FUZZ_EXAMPLES`` (default 500; ``make fuzz`` runs 5000) sets the
number; generation is derandomized (or seeded by ``FUZZ_SEED``) with no example
database, so a run is reproducible and prints its seed, a digest of its specs and
the counts of every outcome. ``FUZZ_SETTLE_TIMEOUT`` (seconds per batch) and
``FUZZ_POD_QUOTA`` (pods per batch namespace) bound the time and the load.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import copy
import hashlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from reward_operator.api import conditions as documented
from reward_testing.fuzz_specs import CONFIG_MAP, SAMPLES, SECRET, SECRET_KEYS, Built, build, generate, short
from reward_testing.waiting import wait_until
from testenv.helpers import condition

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "500"))
BATCH = int(os.environ.get("FUZZ_BATCH", "500"))
# Seconds for one batch's admitted objects to settle once created.
SETTLE_TIMEOUT = float(os.environ.get("FUZZ_SETTLE_TIMEOUT", str(max(240, BATCH * 0.8))))
CREATE_WORKERS = 8
# A ResourceQuota on pods per batch namespace: a spec may ask for 1000 replicas, and
# hundreds of admitted specs would otherwise make thousands of (kwok) pods on two
# cores. Past the quota, KServe reports the Deployments it cannot scale up, which
# is one more end state the operator must pass on.
POD_QUOTA = int(os.environ.get("FUZZ_POD_QUOTA", "40"))

GROUP, VERSION, PLURAL = "serving.rlhf.dev", "v1alpha1", "rewardmodels"
NAMESPACE_LENGTH = 11  # "fz-" and 8 hex digits: the host-name rule depends on it
DNS_LABEL_MAX = 63

# The end states the operator documents (api/conditions.py); KServe's own reasons
# are accepted when they are on the object's InferenceService.
OPERATOR_REASONS = {
    documented.INFERENCE_SERVICE_READY,
    documented.INFERENCE_SERVICE_NOT_READY,
    documented.GATEWAY_NOT_READY,
    documented.INVALID_SPEC,
    documented.APPLY_FAILED,
    *documented.KSERVE_FAILURE_REASONS,
    # Kubernetes' reasons for a container of its pods, where KServe gives none
    *documented.POD_FAILURE_REASONS,
    # spec.cache: the InferenceService waits for the cache (KServe's LocalModel controller fills it)
    documented.AWAITING_MODEL_CACHE,
    documented.MODEL_CACHE_FAILED,
}
# What the operator's log must never hold.
UNHANDLED = re.compile(
    r"Traceback \(most recent call last\)|failed with an exception|failed permanently|unrecoverable error"
)
TEMPORARY = re.compile(r"failed temporarily")
# A field path in an API server message ("spec.model.uri: Required value", or a CEL rule's own words).
FIELD_IN_MESSAGE = re.compile(r"\b(spec|metadata|model|serving|resources|gateway|credentials|env)(\[\w*\])?\.\w+")


@dataclass(frozen=True)
class KnownBug:
    """An operator bug the fuzz found: its cases are counted apart (and printed) until it is fixed;
    the xfail test of the same name holds the exact spec."""

    name: str
    applies: Any  # stored spec -> bool
    problem: str  # the start of the problem it causes
    reason: str


# None open. Fixed: "empty chat template" (model.chatTemplate: '' was admitted and the InferenceService
# mounted a ConfigMap the operator never made; the schema now sets minLength 1, see the test at the end).
KNOWN_BUGS: tuple[KnownBug, ...] = ()


# ---- the oracle for InvalidSpec (the operator's checks, restated from their rules) ----------------


@dataclass
class Holdings:
    """What the batch's namespace and the cluster hold for specs to reference."""

    runtimes: set[str]
    secrets: dict[str, set[str]]
    accounts: set[str]
    keda: bool  # KEDA's ScaledObject is served (scale to zero in Standard mode needs it)
    node_groups: set[str] = field(default_factory=set)  # LocalModelNodeGroups (spec.cache names them)


def _runtimes(spec: dict) -> list[str]:
    """The runtimes the model and its candidate run on: spec.runtime, else the CUDA one with GPUs and
    the CPU one with resources.gpus: 0 (the candidate by its own canary.resources.gpus)."""
    gpus = [spec["resources"]["gpus"]]
    if "canary" in spec:
        gpus.append((spec["canary"].get("resources") or {}).get("gpus", gpus[0]))
    return [spec.get("runtime") or ("vllm-reward-cpu" if count == 0 else "vllm-reward") for count in gpus]


def expected_invalid(obj: dict, namespace: str, held: Holdings) -> str | None:
    spec, name = obj["spec"], obj["metadata"]["name"]
    if spec["serving"]["mode"] == "Standard":
        component = "transformer" if spec["gateway"]["enabled"] else "predictor"
        if len(f"{name}-{component}-{namespace}") > DNS_LABEL_MAX:
            return "host label over 63 characters"
    for runtime in _runtimes(spec):
        if runtime not in held.runtimes:
            return f"runtime {runtime!r} missing"
    credentials = spec.get("credentials") or {}
    refs = []
    if token := credentials.get("huggingFaceToken"):
        refs.append((token["name"], token["key"]))
    for item in spec.get("env") or []:
        if ref := (item.get("valueFrom") or {}).get("secretKeyRef"):
            refs.append((ref["name"], ref["key"]))
    if auth := spec["gateway"].get("authSecretRef"):
        refs.append((auth["name"], auth["key"]))
    for secret, key in refs:
        if key not in held.secrets.get(secret, set()):
            return f"Secret {secret!r} key {key!r} missing"
    account = credentials.get("serviceAccountName")
    if account and account not in held.accounts:
        return f"ServiceAccount {account!r} missing"
    serving = spec["serving"]
    keda_scaled = serving["minReplicas"] == 0 or "targetConcurrency" in serving
    if serving["mode"] == "Standard" and keda_scaled and not held.keda:
        return "KEDA scaling (scale to zero or a concurrency target) in Standard mode without KEDA"
    for group in (spec.get("cache") or {}).get("nodeGroups") or []:
        if group not in held.node_groups:
            return f"LocalModelNodeGroup {group!r} missing"
    return None


# ---- outcomes --------------------------------------------------------------------------------------


@dataclass
class Refusal:
    status: int
    message: str
    fields: list[str]


def refusal_problem(refusal: Refusal) -> str | None:
    """Why a refusal does not meet the bar (a 422 with a message naming a field), or None."""
    strict_decoding = refusal.status == 400 and "unknown field" in refusal.message
    if refusal.status != 422 and not strict_decoding:
        return f"answered {refusal.status}, not 422"
    if not refusal.message.strip():
        return "no message"
    named = [f for f in refusal.fields if f and f != "<nil>"]
    if not named and not FIELD_IN_MESSAGE.search(refusal.message):
        return "the message names no field"
    return None


def kserve_reasons(isvc: dict | None) -> set[str]:
    """Reasons KServe wrote on the InferenceService (condition reasons, its failure diagnosis)."""
    if not isvc:
        return set()
    status = isvc.get("status") or {}
    reasons = set()
    for item in status.get("conditions") or []:
        if item.get("reason"):
            reasons.add(item["reason"])
        # the operator names a component condition without a reason after the component
        reasons.add(f"{item.get('type')}{'False' if item.get('status') == 'False' else 'Unknown'}")
    model_status = status.get("modelStatus") or {}
    reasons |= {model_status.get("transitionStatus"), (model_status.get("lastFailureInfo") or {}).get("reason")}
    return {r for r in reasons if r}


def settled(obj: dict) -> bool:
    ready = condition(obj) or {}
    generation = obj["metadata"]["generation"]
    return (
        (obj.get("status") or {}).get("observedGeneration") == generation
        and ready.get("observedGeneration") == generation
        and bool(ready.get("reason"))
        and ready["reason"] != documented.AWAITING_KSERVE
    )


def mounted_config_maps(isvc: dict) -> list[str]:
    spec = isvc.get("spec") or {}
    return [
        volume["configMap"]["name"]
        for component in ("predictor", "transformer")
        for volume in (spec.get(component) or {}).get("volumes") or []
        if "configMap" in volume
    ]


def end_state_problems(
    obj: dict, isvc: dict | None, namespace: str, held: Holdings, config_maps: set[str]
) -> list[str]:
    ready = condition(obj) or {}
    problems = []
    if not settled(obj):
        return [f"no end state within the wait: status {json.dumps(obj.get('status'))}"]
    reason = ready["reason"]
    if not (ready.get("message") or "").strip():
        problems.append(f"Ready {reason} has no message")
    if reason not in OPERATOR_REASONS and reason not in kserve_reasons(isvc):
        problems.append(f"undocumented reason {reason!r} (KServe's: {sorted(kserve_reasons(isvc))})")
    if (ready["status"] == "True") != (reason == documented.INFERENCE_SERVICE_READY):
        problems.append(f"Ready={ready['status']} with reason {reason}")
    predicted = expected_invalid(obj, namespace, held)
    if predicted and reason != documented.INVALID_SPEC:
        problems.append(f"expected InvalidSpec ({predicted}), got {reason}: {ready.get('message')}")
    if reason == documented.INVALID_SPEC:
        if not predicted:
            problems.append(f"InvalidSpec the oracle does not expect: {ready.get('message')}")
        if isvc is not None:
            problems.append("InvalidSpec, yet an InferenceService exists")
    if ready["status"] == "True" and not (obj.get("status") or {}).get("url"):
        problems.append("Ready=True without status.url")
    # children are applied in order, the ConfigMap before the InferenceService that mounts it
    for name in mounted_config_maps(isvc or {}):
        if name not in config_maps:
            problems.append(f"the InferenceService mounts ConfigMap {name!r}, which does not exist")
    return problems


# ---- the cluster side ------------------------------------------------------------------------------


def _api(cluster) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=cluster.kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = CREATE_WORKERS * 2
    return k8s.ApiClient(configuration)


def create(custom: k8s.CustomObjectsApi, namespace: str, built: Built) -> Refusal | None:
    options = {"field_validation": "Strict"} if built.case.strict else {}
    try:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, built.manifest, _request_timeout=60, **options
        )
        return None
    except ApiException as error:
        try:
            body = json.loads(error.body or "{}")
        except ValueError:
            body = {"message": error.body or ""}
        causes = (body.get("details") or {}).get("causes") or []
        return Refusal(error.status, body.get("message") or "", [c.get("field", "") for c in causes])


def _isvcs(custom: k8s.CustomObjectsApi, namespace: str) -> dict[str, dict]:
    listed = custom.list_namespaced_custom_object("serving.kserve.io", "v1beta1", namespace, "inferenceservices")
    return {item["metadata"]["name"]: item for item in listed["items"]}


def _reward_models(custom: k8s.CustomObjectsApi, namespace: str) -> dict[str, dict]:
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    return {item["metadata"]["name"]: item for item in listed["items"]}


def _prepare_namespace(cluster, core: k8s.CoreV1Api) -> str:
    namespace = f"fz-{uuid.uuid4().hex[:8]}"
    assert len(namespace) == NAMESPACE_LENGTH
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace, "--timeout=60s")
    core.create_namespaced_secret(
        namespace,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=SECRET), string_data={key: "x" for key in SECRET_KEYS}),
    )
    core.create_namespaced_config_map(
        namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=CONFIG_MAP), data={"HF_TOKEN": "x", "token": "x"})
    )
    quota = k8s.V1ResourceQuota(
        metadata=k8s.V1ObjectMeta(name="fz-pods"), spec=k8s.V1ResourceQuotaSpec(hard={"pods": str(POD_QUOTA)})
    )
    core.create_namespaced_resource_quota(namespace, quota)
    # the quota admits pods once the quota controller has counted them
    cluster.kubectl(
        "wait", f"--for=jsonpath={{.status.hard.pods}}={POD_QUOTA}", "resourcequota/fz-pods", "-n", namespace,
        "--timeout=60s",
    )  # fmt: skip
    return namespace


def _holdings(custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api, namespace: str) -> Holdings:
    cluster_runtimes = custom.list_cluster_custom_object("serving.kserve.io", "v1alpha1", "clusterservingruntimes")
    runtimes = custom.list_namespaced_custom_object("serving.kserve.io", "v1alpha1", namespace, "servingruntimes")
    secrets = core.list_namespaced_secret(namespace).items
    return Holdings(
        runtimes={r["metadata"]["name"] for r in cluster_runtimes["items"] + runtimes["items"]},
        secrets={s.metadata.name: set((s.data or {}).keys()) for s in secrets},
        accounts={a.metadata.name for a in core.list_namespaced_service_account(namespace).items},
        keda=any(group.name == "keda.sh" for group in k8s.ApisApi(core.api_client).get_api_versions().groups),
        node_groups=_node_groups(custom),
    )


def _node_groups(custom: k8s.CustomObjectsApi) -> set[str]:
    """The LocalModelNodeGroups (none where KServe's LocalModel CRDs are not installed)."""
    try:
        listed = custom.list_cluster_custom_object("serving.kserve.io", "v1alpha1", "localmodelnodegroups")
    except ApiException as error:
        if error.status == 404:
            return set()
        raise
    return {group["metadata"]["name"] for group in listed["items"]}


@dataclass
class Tally:
    refused: collections.Counter = field(default_factory=collections.Counter)  # by field and message
    states: collections.Counter = field(default_factory=collections.Counter)  # by Ready status and reason
    failures: list[str] = field(default_factory=list)
    known: collections.Counter = field(default_factory=collections.Counter)  # cases of KNOWN_BUGS
    created_s: float = 0.0
    settled_s: float = 0.0
    generated: int = 0
    admitted: int = 0


def _describe(built: Built) -> str:
    mutated = "; ".join(m.describe() for m in built.case.mutations) or "none"
    return (
        f"#{built.index} {built.manifest['metadata']['name']!r} from {built.case.sample}"
        f" (strict={built.case.strict}), mutations: {mutated}\n    spec: {short(built.manifest['spec'], 1500)}"
    )


def run_batch(cluster, operator, api: k8s.ApiClient, batch: list[Built], tally: Tally) -> str:
    custom, core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
    namespace = _prepare_namespace(cluster, core)
    held = _holdings(custom, core, namespace)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CREATE_WORKERS) as pool:
        refusals = list(pool.map(lambda b: create(custom, namespace, b), batch))
    tally.created_s += time.monotonic() - started

    admitted: dict[str, Built] = {}
    for built, refusal in zip(batch, refusals, strict=True):
        if refusal is None:
            admitted[built.manifest["metadata"]["name"]] = built
            if built.must_refuse:
                tally.failures.append(f"admitted, but must be refused ({built.must_refuse}): {_describe(built)}")
            continue
        if problem := refusal_problem(refusal):
            tally.failures.append(f"refused badly ({problem}): {refusal.message!r}\n  {_describe(built)}")
        named = ",".join(sorted({f for f in refusal.fields if f})) or "-"
        tally.refused[f"{named}: {refusal.message.partition(': ')[2][:90] or refusal.message[:90]}"] += 1
    tally.admitted += len(admitted)

    last: dict[str, dict] = {}
    progress = {"at": time.monotonic()}

    def all_settled() -> bool:
        assert operator.alive(), f"the operator exited:\n{operator.log()[-5000:]}"
        last.clear()
        last.update(_reward_models(custom, namespace))
        done = sum(1 for name in admitted if name in last and settled(last[name]))
        if time.monotonic() - progress["at"] > 15:
            progress["at"] = time.monotonic()
            print(f"  {namespace}: {done}/{len(admitted)} settled after {time.monotonic() - started:.0f}s")
        return done == len(admitted)

    try:
        wait_until(f"{len(admitted)} fuzzed RewardModels to settle", all_settled, timeout=SETTLE_TIMEOUT, interval=1)
    except AssertionError as timeout:
        if not operator.alive():
            raise
        tally.failures.append(str(timeout)[:300])
    tally.settled_s += time.monotonic() - started

    # Judged on fresh lists; KServe may move on between the two, so a mismatch is
    # judged again on newer ones before it counts (a real one persists).
    verdict: dict[str, list[str]] = {}

    def consistent() -> bool:
        isvcs = _isvcs(custom, namespace)
        config_maps = {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}
        current = _reward_models(custom, namespace)
        verdict.clear()
        for name in admitted:
            if name not in current:
                verdict[name] = ["admitted, then gone"]
            elif problems := end_state_problems(current[name], isvcs.get(name), namespace, held, config_maps):
                verdict[name] = problems
        last.update(current)
        return not verdict

    with contextlib.suppress(AssertionError):  # what remains is in verdict
        wait_until("every end state to check out", consistent, timeout=20, interval=2)
    for name, built in admitted.items():
        ready = condition(last.get(name)) or {}
        state = f"Ready={ready.get('status')} {ready.get('reason')}"
        if ready.get("reason") == documented.INVALID_SPEC and name in last:
            # by the oracle's account of the first gap (the operator's message says it in words)
            state += f" ({re.sub(r' .*', '', expected_invalid(last[name], namespace, held) or 'unexpected')})"
        tally.states[state] += 1
        for problem in verdict.get(name, []):
            spec = (last.get(name) or {}).get("spec") or {}
            bug = next((b for b in KNOWN_BUGS if b.applies(spec) and problem.startswith(b.problem)), None)
            if bug is not None:
                tally.known[bug.name] += 1
            else:
                tally.failures.append(f"{problem}\n  {_describe(built)}")
    return namespace


def _log_from(operator, offset: int) -> str:
    return operator.log_path.read_bytes()[offset:].decode(errors="replace")


# ---- the test --------------------------------------------------------------------------------------


@pytest.mark.timeout(max(600, int(EXAMPLES * 1.5)))
def test_fuzzed_specs_end_in_defined_states(cluster, kserve_runs, operator):
    cases_, seeded = generate(EXAMPLES)
    built = [build(case, i) for i, case in enumerate(cases_)]
    digest = hashlib.sha256(json.dumps([b.manifest for b in built], sort_keys=True).encode()).hexdigest()[:16]
    print(
        f"\nfuzz: {len(built)} specs (FUZZ_EXAMPLES={EXAMPLES}, batches of {BATCH}), hypothesis "
        f"{hypothesis.__version__}, {seeded}, database=None; specs sha256 {digest}"
    )
    assert len(built) >= min(EXAMPLES, 500), f"hypothesis generated only {len(built)} cases"

    api = _api(cluster)
    pid, offset = operator.process.pid, operator.log_path.stat().st_size
    tally = Tally(generated=len(built))
    namespaces = []
    for start in range(0, len(built), BATCH):
        if namespaces:  # keep the load bounded: the previous batch's objects are collected first
            previous = namespaces[-1]
            cluster.kubectl("delete", "namespace", previous, "--wait=false")
            wait_until(
                f"namespace {previous} to be deleted",
                lambda ns=previous: cluster.kubectl("get", "namespace", ns, check=False).returncode != 0,
                timeout=600,
                interval=2,
            )
        namespaces.append(run_batch(cluster, operator, api, built[start : start + BATCH], tally))
    cluster.kubectl("delete", "namespace", namespaces[-1], "--wait=false", check=False)

    log = _log_from(operator, offset)
    unhandled = [line for line in log.splitlines() if UNHANDLED.search(line)]
    temporary = [line for line in log.splitlines() if TEMPORARY.search(line)]

    print(f"fuzz: refused at admission {sum(tally.refused.values())}, admitted {tally.admitted}")
    for state, count in sorted(tally.states.items(), key=lambda item: -item[1]):
        print(f"  {count:5d}  {state}")
    print("fuzz: most frequent refusals:")
    for message, count in tally.refused.most_common(12):
        print(f"  {count:5d}  {message}")
    print(
        f"fuzz: created in {tally.created_s:.1f}s, settled in {tally.settled_s:.1f}s; operator pid {pid} "
        f"alive={operator.alive()}, {len(unhandled)} unhandled errors, {len(temporary)} temporary retries"
    )
    for line in temporary[:5]:
        print(f"  retry: {line[:200]}")
    for bug, count in tally.known.items():
        print(f"fuzz: {count} cases of the known bug {bug!r} (see its xfail test)")

    assert operator.alive() and operator.process.pid == pid, "the operator exited or was replaced"
    assert operator.live(), "the operator's liveness endpoint stopped answering"
    assert not unhandled, "the operator logged unhandled errors:\n" + "\n".join(unhandled[:20])
    assert not tally.failures, f"{len(tally.failures)} objects did not end in a defined state:\n" + "\n".join(
        tally.failures[:15]
    )
    assert tally.admitted and sum(tally.refused.values()), "the fuzz must reach both the refused and admitted paths"


# ---- the bugs the fuzz found, each with its exact spec --------------------------------------------


def test_an_empty_chat_template_is_refused_at_admission(cluster, namespace):
    """Found by the fuzz: '' was admitted, and the predictor mounted a ConfigMap that was never made
    (its pods would never start). Now the schema refuses it and says what to do."""
    manifest = copy.deepcopy(SAMPLES["rewardmodel-sequence-standard.yaml"])
    manifest["metadata"] = {"name": "empty-template"}
    manifest["spec"]["model"]["chatTemplate"] = ""
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False)
    assert refused.returncode != 0, "model.chatTemplate: '' was admitted"
    assert "spec.model.chatTemplate" in refused.stderr and "at least 1" in refused.stderr, refused.stderr
    absent = cluster.kubectl("get", "rewardmodel", "empty-template", "-n", namespace, check=False)
    assert absent.returncode != 0, "a refused RewardModel must not be stored"
