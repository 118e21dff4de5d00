"""The operator running for real, with KServe's own controller and webhooks: what a
user sees after `kubectl apply -f rewardmodel.yaml`.

Nothing here stands in for KServe: an InferenceService is defaulted and validated
by KServe's webhooks, its Deployments and Services are KServe's, its pods run on
kwok's nodes, and its status is the one KServe writes.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
import yaml

from reward_operator.render.predictor import PREDICTOR_GRACE_SECONDS
from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv.helpers import ISVC_LABEL, condition, get_json, wait_for_ready

pytestmark = pytest.mark.usefixtures("kserve_runs")  # skipped where the cluster has no KServe

SAMPLE = yaml.safe_load((REPO / "manifests/samples/rewardmodel-sequence-standard.yaml").read_text())
STANDARD_SAMPLES = {
    "sequence": "rewardmodel-sequence-standard.yaml",
    "token": "rewardmodel-token-standard.yaml",
    "process": "rewardmodel-process-standard.yaml",
}


def apply_reward_model(cluster, namespace: str, name: str = "skywork-rm", manifest: dict | None = None, **spec):
    manifest = json.loads(json.dumps(manifest or SAMPLE))
    manifest["metadata"]["name"] = name
    manifest["spec"].update(spec)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    return get_json(cluster, "rewardmodel", name, "-n", namespace)


def reward_model(cluster, namespace: str, name: str = "skywork-rm") -> dict | None:
    return get_json(cluster, "rewardmodel", name, "-n", namespace)


def isvc_of(cluster, namespace: str, name: str) -> dict | None:
    return get_json(cluster, "inferenceservice", name, "-n", namespace)


def merge_patch(cluster, namespace: str, kind: str, patch: dict, name: str = "skywork-rm") -> None:
    cluster.kubectl("patch", kind, name, "-n", namespace, "--type=merge", "-p", json.dumps(patch))


def events_for(cluster, namespace: str, name: str) -> list[dict]:
    """Events about the RewardModel (KServe posts its own about the InferenceService of the same name)."""
    selector = f"involvedObject.kind=RewardModel,involvedObject.name={name}"
    listed = get_json(cluster, "events", "-n", namespace, "--field-selector", selector)
    return listed["items"] if listed else []


def wait_for_reason(cluster, namespace: str, name: str, reason: str, timeout: float = 90) -> dict:
    def reached():
        obj = reward_model(cluster, namespace, name)
        return obj if (condition(obj) or {}).get("reason") == reason else None

    return wait_until(f"{name} Ready reason {reason}", reached, timeout=timeout)


def workloads(cluster, namespace: str, name: str) -> dict[str, list[str]]:
    """What KServe made for InferenceService ``name``, by kind."""
    found = {}
    for kind in ("deployments", "services", "horizontalpodautoscalers", "pods"):
        listed = get_json(cluster, kind, "-n", namespace, "-l", f"{ISVC_LABEL}={name}")
        found[kind] = sorted(item["metadata"]["name"] for item in (listed or {}).get("items", []))
    # KServe's Ingress carries no labels: it is found by its owner
    ingresses = (get_json(cluster, "ingresses", "-n", namespace) or {}).get("items", [])
    found["ingresses"] = sorted(
        item["metadata"]["name"]
        for item in ingresses
        if any(
            ref["kind"] == "InferenceService" and ref["name"] == name
            for ref in item["metadata"].get("ownerReferences", [])
        )
    )
    return found


@pytest.fixture
def hf_token(cluster, namespace):
    cluster.kubectl("create", "secret", "generic", "hf-token", "-n", namespace, "--from-literal=HF_TOKEN=x")


def test_create_renders_an_owned_inference_service(cluster, namespace, operator):
    created = apply_reward_model(cluster, namespace)
    isvc = wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    (owner,) = isvc["metadata"]["ownerReferences"]
    assert owner["uid"] == created["metadata"]["uid"]
    assert owner["kind"] == "RewardModel" and owner["controller"] is True
    labels = isvc["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "reward-operator"
    assert labels["serving.rlhf.dev/rewardmodel"] == "skywork-rm"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    # the spec is ours alone: KServe's controller adds only its finalizer and the status
    with_fields = get_json(cluster, "inferenceservice", "skywork-rm", "-n", namespace, "--show-managed-fields")
    spec_managers = {
        entry["manager"] for entry in with_fields["metadata"]["managedFields"] if "f:spec" in entry.get("fieldsV1", {})
    }
    assert spec_managers == {"reward-operator"}
    args = isvc["spec"]["predictor"]["model"]["args"]
    assert "--served-model-name=skywork-rm" in args and "--runner=pooling" in args


@pytest.mark.parametrize("kind", sorted(STANDARD_SAMPLES))
def test_each_kind_is_served_through_kserve(cluster, namespace, operator, kind):
    manifest = yaml.safe_load((REPO / "manifests" / "samples" / STANDARD_SAMPLES[kind]).read_text())
    name = manifest["metadata"]["name"]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    obj = wait_for_ready(cluster, namespace, name)
    assert condition(obj)["reason"] == "InferenceServiceReady"
    # the address trainers in the cluster reach: the gateway's Service
    assert obj["status"]["url"] == f"http://{name}-transformer.{namespace}.svc.cluster.local"
    assert obj["status"]["externalURL"].endswith(".example.com")  # KServe's default ingress domain
    assert obj["status"]["replicas"] == 1
    made = workloads(cluster, namespace, name)
    assert made["deployments"] == [f"{name}-predictor", f"{name}-transformer"]
    isvc = isvc_of(cluster, namespace, name)
    assert {c["type"]: c["status"] for c in isvc["status"]["conditions"]}["TransformerReady"] == "True"
    # KServe's pod webhook injected its storage initializer into the predictor
    predictor_pods = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={name},component=predictor")
    (pod,) = predictor_pods["items"]
    assert [c["name"] for c in pod["spec"].get("initContainers", [])] == ["storage-initializer"]
    # the gateway runs with our model name and KServe's predictor host
    gateway_pods = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={name},component=transformer")
    args = gateway_pods["items"][0]["spec"]["containers"][0]["args"]
    served = manifest["spec"]["model"].get("servedName", name)
    assert args[0] == f"--model_name={served}" and args.count("--model_name") == 0
    assert f"{name}-predictor.{namespace}" in args


def test_ready_is_reported_once_and_shown_in_kubectl(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    obj = wait_for_ready(cluster, namespace, "skywork-rm")
    # Counted only once kopf has handled a later change: a second Ready event, from any reconcile
    # that read the status from before the first, has been posted by then.
    cluster.kubectl("annotate", "rewardmodel", "skywork-rm", "-n", namespace, "touched=1")
    wait_until("the edit to be handled", lambda: "touched" in handled_configuration(cluster, namespace, "skywork-rm"))
    ours = events_for(cluster, namespace, "skywork-rm")
    ready_events = [(e["type"], e["count"]) for e in ours if e["reason"] == "InferenceServiceReady"]
    assert ready_events == [("Normal", 1)], ours
    # a normal start needs no person: progress while KServe works is Normal
    assert [e for e in ours if e["type"] == "Warning"] == [], ours
    columns = cluster.kubectl("get", "rewardmodel", "skywork-rm", "-n", namespace).stdout.splitlines()[1].split()
    assert "True" in columns and obj["status"]["url"] in columns and "1" in columns


def test_no_fight_with_kserves_defaulting(cluster, namespace, operator):
    """After convergence the InferenceService's spec stays still with the operator running.

    KServe's webhook defaults fields on every apply; server-side apply leaves them to
    it, so neither the generation nor the spec moves. Status updates by KServe's
    controller (and the reconciles they trigger) go on meanwhile."""
    apply_reward_model(cluster, namespace)
    wait_for_ready(cluster, namespace, "skywork-rm")
    first = isvc_of(cluster, namespace, "skywork-rm")
    reconciles_before = operator.reconciles()
    merge_patch(cluster, namespace, "rewardmodel", {"metadata": {"annotations": {"touched": "1"}}})
    # every change to the InferenceService from `first` on, for 60 s: the API server's own watch
    watch = cluster.kubectl(
        "get", "--raw",
        f"/apis/serving.kserve.io/v1beta1/namespaces/{namespace}/inferenceservices?watch=1"
        f"&fieldSelector=metadata.name%3Dskywork-rm&resourceVersion={first['metadata']['resourceVersion']}"
        "&timeoutSeconds=60",
    )  # fmt: skip
    changes = [json.loads(line)["object"] for line in watch.stdout.splitlines() if line.strip()]
    for changed in changes:
        assert changed["metadata"]["generation"] == first["metadata"]["generation"]
        assert changed["spec"] == first["spec"]
    assert operator.reconciles() > reconciles_before, "the operator reconciled (and re-applied) meanwhile"


def test_spec_change_rolls_the_predictor(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    wait_for_ready(cluster, namespace, "skywork-rm")
    before = get_json(cluster, "deployment", "skywork-rm-predictor", "-n", namespace)
    assert before["spec"]["strategy"]["type"] == "Recreate"
    # the operator's grace reaches the pods through KServe (a predictor pod deleted mid-call stays that long)
    assert before["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == PREDICTOR_GRACE_SECONDS
    merge_patch(cluster, namespace, "rewardmodel", {"spec": {"model": {"maxModelLen": 8192}}})

    def rolled():
        deployment = get_json(cluster, "deployment", "skywork-rm-predictor", "-n", namespace)
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        return deployment if "--max-model-len=8192" in args else None

    wait_until("the predictor Deployment with the new args", rolled, timeout=60)
    obj = wait_for_ready(cluster, namespace, "skywork-rm", generation=2)
    assert condition(obj)["observedGeneration"] == 2


def test_child_deleted_by_hand_is_restored(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    first = wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    cluster.kubectl("delete", "inferenceservice", "skywork-rm", "-n", namespace)
    wait_until(
        "a restored InferenceService",
        lambda: (i := isvc_of(cluster, namespace, "skywork-rm")) and i["metadata"]["uid"] != first["metadata"]["uid"],
        timeout=60,
    )


def test_owned_field_edited_by_hand_is_reverted(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    merge_patch(cluster, namespace, "inferenceservice", {"spec": {"predictor": {"maxReplicas": 40}}})
    wait_until(
        "maxReplicas restored to the sample's 4",
        lambda: isvc_of(cluster, namespace, "skywork-rm")["spec"]["predictor"]["maxReplicas"] == 4,
        timeout=30,
    )


def test_deleting_the_reward_model_leaves_nothing_behind(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    wait_for_ready(cluster, namespace, "skywork-rm")
    made = workloads(cluster, namespace, "skywork-rm")
    assert made["deployments"] and made["services"] and made["horizontalpodautoscalers"] and made["ingresses"]
    cluster.kubectl("delete", "rewardmodel", "skywork-rm", "-n", namespace, "--timeout=60s")
    wait_until("the InferenceService to be collected", lambda: isvc_of(cluster, namespace, "skywork-rm") is None)
    wait_until(
        "KServe's Deployments, Services, HPAs, Ingress and pods to be collected",
        lambda: not any(workloads(cluster, namespace, "skywork-rm").values()),
        timeout=90,
    )


def test_chat_template_with_jinja_is_served(cluster, namespace, operator):
    """A Jinja template inline would make KServe refuse the InferenceService (Go template parse)."""
    template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    apply_reward_model(
        cluster,
        namespace,
        name="templated",
        model={**SAMPLE["spec"]["model"], "chatTemplate": template},
        gateway={"chatTemplateMode": "gateway"},
    )
    wait_for_ready(cluster, namespace, "templated")
    config_map = get_json(cluster, "configmap", "templated-chat-template", "-n", namespace)
    assert config_map["data"]["chat_template.jinja"] == template
    pods = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}=templated")["items"]
    mounted = {c["name"] for pod in pods for c in pod["spec"]["containers"] for m in c.get("volumeMounts", [])
               if m["name"] == "chat-template"}  # fmt: skip
    assert "kserve-container" in mounted


def test_hugging_face_token_reaches_kserves_storage_initializer(cluster, namespace, operator, hf_token):
    apply_reward_model(cluster, namespace, credentials={"huggingFaceToken": {"name": "hf-token"}})
    wait_for_ready(cluster, namespace, "skywork-rm")
    pods = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}=skywork-rm,component=predictor")
    (initializer,) = pods["items"][0]["spec"]["initContainers"]
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in initializer.get("env", [])}
    assert env.get("HF_TOKEN") == {"name": "hf-token", "key": "HF_TOKEN"}


# ---- failures reach the user ----------------------------------------------------------------

NO_VLLM_RUNTIME = """\
apiVersion: serving.kserve.io/v1alpha1
kind: ServingRuntime
metadata:
  name: sklearn-only
spec:
  supportedModelFormats:
  - name: sklearn
  protocolVersions: [v1]
  containers:
  - name: kserve-container
    image: example/sklearn:1
"""

CRASHING_RUNTIME = """\
apiVersion: serving.kserve.io/v1alpha1
kind: ServingRuntime
metadata:
  name: crashing-vllm
spec:
  # kwok's testenv-pod-crash-loop stage makes pods with this label crash-loop
  labels:
    testenv.rlhf.dev/crash-loop: "true"
  supportedModelFormats:
  - name: vLLM
  protocolVersions: [v1]
  containers:
  - name: kserve-container
    image: example/vllm-broken:1
    args: ["--port=8080", "--model=/mnt/models"]
"""


def _served_on(cluster, namespace: str, runtime: str, name: str, reason: str) -> dict:
    """A RewardModel on ``runtime`` (a ServingRuntime manifest): its Ready=False condition with KServe's ``reason``."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=runtime)
    apply_reward_model(cluster, namespace, name=name, runtime=yaml.safe_load(runtime)["metadata"]["name"])
    ready = condition(wait_for_reason(cluster, namespace, name, reason))
    assert ready["status"] == "False"
    return ready


def test_a_runtime_without_the_model_format_shows_kserves_reason(cluster, namespace, operator):
    ready = _served_on(cluster, namespace, NO_VLLM_RUNTIME, "wrong-runtime", "NoSupportingRuntime")
    assert "does not support" in ready["message"], ready["message"]
    assert operator.alive()


def test_a_crash_looping_predictor_shows_kserves_reason_and_exit_code(cluster, namespace, operator):
    ready = _served_on(cluster, namespace, CRASHING_RUNTIME, "crashing", "ModelLoadFailed")
    assert "exit code 1" in ready["message"], ready["message"]
    wait_until(
        "the Warning event", lambda: "Warning" in [e["type"] for e in events_for(cluster, namespace, "crashing")]
    )


def handled_configuration(cluster, namespace: str, name: str) -> str:
    obj = reward_model(cluster, namespace, name) or {}
    return obj.get("metadata", {}).get("annotations", {}).get("serving.rlhf.dev/last-handled-configuration", "")


def _invalid_and_valid_side_by_side(cluster, namespace, bad_name: str, **bad_spec) -> dict:
    apply_reward_model(cluster, namespace, name=bad_name, **bad_spec)
    apply_reward_model(cluster, namespace, name="healthy")
    obj = wait_for_reason(cluster, namespace, bad_name, "InvalidSpec")
    assert condition(obj)["status"] == "False"
    # the healthy neighbour keeps being served
    wait_for_ready(cluster, namespace, "healthy")
    assert isvc_of(cluster, namespace, bad_name) is None
    return obj


def test_missing_runtime_is_an_invalid_spec_with_one_warning(cluster, namespace, operator):
    obj = _invalid_and_valid_side_by_side(cluster, namespace, "no-runtime", runtime="does-not-exist")
    assert "does-not-exist" in condition(obj)["message"]
    # further reconciles (a metadata edit triggers one) neither crash nor repeat the event
    wait_until("the InvalidSpec event", lambda: events_for(cluster, namespace, "no-runtime"))
    cluster.kubectl("annotate", "rewardmodel", "no-runtime", "-n", namespace, "touched=1")
    # kopf records what it handled once the handler is done: the edit was reconciled
    wait_until("the edit to be handled", lambda: "touched" in handled_configuration(cluster, namespace, "no-runtime"))
    warnings = [e for e in events_for(cluster, namespace, "no-runtime") if e["type"] == "Warning"]
    assert len(warnings) == 1, warnings
    assert warnings[0]["reason"] == "InvalidSpec" and warnings[0]["count"] == 1
    assert operator.alive()


def test_missing_credentials_secret_is_an_invalid_spec(cluster, namespace, operator):
    obj = _invalid_and_valid_side_by_side(
        cluster, namespace, "no-secret", credentials={"huggingFaceToken": {"name": "hf-token"}}
    )
    assert "Secret 'hf-token' not found" in condition(obj)["message"]
    # fixing the cause (creating the Secret) and touching the object converges it
    cluster.kubectl("create", "secret", "generic", "hf-token", "-n", namespace, "--from-literal=HF_TOKEN=x")
    cluster.kubectl("annotate", "rewardmodel", "no-secret", "-n", namespace, "fixed=1")
    wait_for_ready(cluster, namespace, "no-secret")
    assert operator.alive()


def test_scale_to_zero_in_standard_mode_without_keda_is_an_invalid_spec(cluster, namespace, operator):
    """minReplicas 0 in Standard mode needs KEDA's ScaledObject; on a cluster without KEDA the
    RewardModel says so (and what to use instead) and nothing of it is applied."""
    if cluster.kubectl("get", "crd/scaledobjects.keda.sh", check=False).returncode == 0:
        pytest.skip("KEDA is installed on this cluster (test_keda.py covers it)")
    obj = _invalid_and_valid_side_by_side(
        cluster, namespace, "no-keda", serving={"mode": "Standard", "minReplicas": 0, "maxReplicas": 2}
    )
    message = condition(obj)["message"]
    assert "no keda.sh/v1alpha1 ScaledObject" in message and "install KEDA" in message, message
    assert get_json(cluster, "service", "no-keda-gateway-scaler", "-n", namespace) is None
    assert operator.alive()


def test_a_concurrency_target_in_standard_mode_without_keda_is_an_invalid_spec(cluster, namespace, operator):
    """targetConcurrency above zero in Standard mode is KEDA's to honour (KServe's HPA takes CPU or memory
    only): without KEDA the RewardModel names the field and the ways out, and nothing of it is applied."""
    if cluster.kubectl("get", "crd/scaledobjects.keda.sh", check=False).returncode == 0:
        pytest.skip("KEDA is installed on this cluster (test_keda.py covers it)")
    obj = _invalid_and_valid_side_by_side(
        cluster,
        namespace,
        "no-keda-target",
        serving={"mode": "Standard", "minReplicas": 1, "maxReplicas": 2, "targetConcurrency": 16},
    )
    message = condition(obj)["message"]
    assert message.startswith("spec.serving.targetConcurrency"), message
    assert "install KEDA" in message and "resources.cpu" in message, message
    assert get_json(cluster, "service", "no-keda-target-gateway-scaler", "-n", namespace) is None
    assert operator.alive()


def test_status_replicas_follow_the_predictor_when_something_else_scales_it(cluster, namespace, operator):
    """An autoscaler (KServe's HPA here, KEDA or Knative elsewhere) scales the predictor's Deployment
    without a word to the RewardModel: status.replicas follows, long before the hourly drift timer.
    (In Standard mode KServe's own status on the InferenceService moves too, so this passes through
    either of the operator's watches; the Deployment watch alone, which Knative mode needs, is pinned by
    operator/tests/test_controllers.py.)"""
    apply_reward_model(cluster, namespace)  # Standard mode, 1..4 on KServe's HPA
    assert wait_for_ready(cluster, namespace, "skywork-rm")["status"]["replicas"] == 1

    def replicas(count: int):
        def reached():
            obj = reward_model(cluster, namespace)
            return obj if (obj.get("status") or {}).get("replicas") == count else None

        return reached

    # as an autoscaler would: the HPA, with no metrics to go on here, leaves a count at zero alone
    cluster.kubectl("scale", "deployment", "skywork-rm-predictor", "--replicas=0", "-n", namespace)
    obj = wait_until("status.replicas 0 after the predictor went to zero", replicas(0), timeout=60)
    # a minimum above zero: the spec never sleeps on purpose, so there is no ScaledToZero to report
    assert all(c["type"] != "ScaledToZero" for c in obj["status"]["conditions"])
    cluster.kubectl("scale", "deployment", "skywork-rm-predictor", "--replicas=1", "-n", namespace)
    wait_until("status.replicas 1 once the predictor's pod is ready again", replicas(1), timeout=90)
    assert operator.alive()


def test_a_name_too_long_for_kserves_host_names_is_an_invalid_spec(cluster, operator):
    """Standard mode: <name>-transformer-<namespace> must fit a 63-character DNS label."""
    namespace = "t-" + "n" * 30
    cluster.kubectl("create", "namespace", namespace)
    try:
        apply_reward_model(cluster, namespace, name="r" * 30)
        obj = wait_for_reason(cluster, namespace, "r" * 30, "InvalidSpec")
        assert "over the 63 a DNS label allows" in condition(obj)["message"]
        assert isvc_of(cluster, namespace, "r" * 30) is None
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_operator_exports_metrics_and_liveness(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    wait_until("a status", lambda: condition(reward_model(cluster, namespace)))
    with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
        text = response.read().decode()
    for name in (
        "reward_operator_reconcile_total",
        "reward_operator_reconcile_duration_seconds_bucket",
        "reward_operator_objects",
        "reward_operator_object_ready",
    ):
        assert name in text
    with urllib.request.urlopen(operator.liveness_url, timeout=5) as response:
        assert response.status == 200
