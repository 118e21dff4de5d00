"""The operator against the API server's floor: convergence, reconcile latency, memory, idle CPU, API requests.

For each N in BENCH_N (default 100,1000), on fresh local control planes
(``e2e/testenv``: kube-apiserver, etcd, controller-manager, scheduler, kwok, and
KServe's own manager, whose controller makes the InferenceServices Ready against
kwok's pods):

- floor: on one fresh control plane, N InferenceServices, exactly what the
  operator renders (``render_reward_model``, less the owner reference a direct
  client cannot have), created by BENCH_CONCURRENCY (32) threads; the time until
  every one exists and until every one is Ready, as one watch sees them;
- operator: on another fresh control plane, the operator started as the e2e tests
  start it (``reward-operator run --standalone -A``, the chart's default drift
  interval unless BENCH_DRIFT_INTERVAL says otherwise), N RewardModels created by
  the same 32 threads; the time until every child InferenceService exists, until
  every status has observedGeneration == generation, and until every RewardModel
  is Ready with it; the ratio to the floor;
- reconcile latency: BENCH_CHANGES (50) spec changes one after another
  (spec.serving.maxReplicas toggled between 2 and 3, which the child carries),
  each timed from the patch to the child's new maxReplicas seen through the watch,
  and to the status's observedGeneration reaching the new generation;
- the operator's peak RSS (VmHWM) and its CPU while idle with N objects
  (utime+stime over BENCH_IDLE_S, 60 s), then the same after a restart with
  BENCH_ALT_DRIFT (3600) as drift interval ('' skips that step);
- API requests: the operator runs as a user of its own (a client certificate,
  cluster-admin through a binding) whose requests a FlowSchema of its own
  classifies, so the API server's own metrics count exactly its requests
  (``apiserver_flowcontrol_dispatched_requests_total`` of that FlowSchema);
  divided by the reconciles it reports. ``apiserver_request_total`` by verb and
  resource, operator run less floor run, shows where they go.

Everything is measured with one watch per resource type, never by polling each
object. Figures are printed, never asserted: other work on the machine moves them,
so the load average is printed beside each phase.
"""

from __future__ import annotations

import base64
import math
import os
import platform
import re
import resource
import shlex
import signal
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml
from bench_api import Api, Watch  # beside this script

from reward_operator.api import API_VERSION, GROUP, REWARD_MODEL_KIND, REWARD_MODEL_PLURAL
from reward_operator.api.kserve import INFERENCE_SERVICE_API_VERSION, INFERENCE_SERVICE_KIND, INFERENCE_SERVICE_PLURAL
from reward_operator.render import render_reward_model
from reward_operator.settings import Settings
from reward_testing import pki
from reward_testing.paths import REPO
from testenv.operator_process import DRIFT_ENV, OperatorProcess
from testenv.plane import controlplane

SIZES = [int(n) for n in os.environ.get("BENCH_N", "100,1000").split(",") if n.strip()]
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "32"))
CHANGES = int(os.environ.get("BENCH_CHANGES", "50"))
# The latency phase stops starting changes after this many seconds (a backlogged operator takes minutes each).
LATENCY_BUDGET_S = float(os.environ.get("BENCH_LATENCY_BUDGET_S", "300"))
IDLE_S = float(os.environ.get("BENCH_IDLE_S", "60"))
DRIFT_INTERVAL = os.environ.get("BENCH_DRIFT_INTERVAL", "")  # '' = the operator's (and the chart's) default
ALT_DRIFT = os.environ.get("BENCH_ALT_DRIFT", "3600")
# Another command in place of `reward-operator` (the same arguments follow), to compare a
# proposed change (a wrapper that sets kopf settings, say) with the operator as it is.
OPERATOR_COMMAND = shlex.split(os.environ.get("BENCH_OPERATOR_COMMAND", "")) or [
    str(Path(sys.executable).parent / "reward-operator")
]
# Seconds to wait for convergence before reporting how far it got (default 300 + 1.5 s per object).
TIMEOUT = os.environ.get("BENCH_TIMEOUT", "")
PHASES = set(os.environ.get("BENCH_PHASES", "floor,operator").split(","))
NAMESPACE = "bench"
OPERATOR_USER = "reward-operator-bench"
GOAL_RATIO, GOAL_RSS_MB, GOAL_IDLE_CPU = 1.5, 200, 2.0

RM_PATH = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/{REWARD_MODEL_PLURAL}"
ISVC_PATH = f"/apis/{INFERENCE_SERVICE_API_VERSION}/namespaces/{NAMESPACE}/{INFERENCE_SERVICE_PLURAL}"


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> str:
    memory = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.machine(),
    )
    gib = int(memory.split()[1]) / 2**20
    return (
        f"{os.cpu_count()} CPUs ({model}), {gib:.1f} GiB memory, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def _ready(obj: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def rm_summary(obj: dict) -> dict:
    status = obj.get("status") or {}
    return {
        "generation": obj["metadata"].get("generation"),
        "observed": status.get("observedGeneration"),
        "ready": _ready(obj),
        "max": obj["spec"]["serving"].get("maxReplicas"),
    }


def rm_flags(summary: dict) -> set[str]:
    flags = {"exists"}
    if summary["observed"] == summary["generation"]:
        flags.add("current")
        if summary["ready"]:
            flags.add("done")
    if summary["ready"]:
        flags.add("ready")
    return flags


def isvc_summary(obj: dict) -> dict:
    return {"ready": _ready(obj), "max": obj["spec"]["predictor"].get("maxReplicas")}


def isvc_flags(summary: dict) -> set[str]:
    return {"exists", "ready"} if summary["ready"] else {"exists"}


# ---- the objects ------------------------------------------------------------------------------------


def reward_model(index: int) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": REWARD_MODEL_KIND,
        "metadata": {"name": f"rm-{index:04d}", "namespace": NAMESPACE},
        "spec": {
            "model": {"uri": f"hf://bench/reward-model-{index:04d}", "kind": "sequence"},
            "resources": {"gpus": 1, "cpu": "2", "memory": "16Gi"},
            "serving": {"mode": "Standard", "minReplicas": 1, "maxReplicas": 2},
        },
    }


def floor_inference_service(index: int) -> dict:
    """Exactly what the operator applies for reward_model(index), less the owner reference (no owner here)."""
    children = render_reward_model(reward_model(index), Settings().gateway_image)
    (isvc,) = [child for child in children if child["kind"] == INFERENCE_SERVICE_KIND]
    isvc["metadata"].pop("ownerReferences", None)
    return isvc


def bench_nodes(n: int) -> list[dict]:
    """Fake nodes with room for N predictors (one GPU each) and N gateways; the testenv's three hold 16 GPUs."""
    count = max(1, math.ceil(2 * n / 800))
    capacity = {"cpu": "4000", "memory": "64Ti", "pods": "1000", "ephemeral-storage": "100Ti", "nvidia.com/gpu": "500"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"bench-gpu-{i}",
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {
                    "kubernetes.io/hostname": f"bench-gpu-{i}",
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    "serving.kserve.io/nodegroup": "gpu",
                },
            },
            "status": {"capacity": capacity, "allocatable": capacity},
        }
        for i in range(count)
    ]


def operator_identity(plane: controlplane.ControlPlane, directory: Path) -> tuple[Path, list[dict]]:
    """A kubeconfig for a user of its own, and the RBAC and FlowSchema that give it rights and count it.

    The FlowSchema puts the user's requests on the exempt priority level, as the
    admin's are, so nothing throttles the operator that did not before."""
    assert plane.state is not None
    keys = directory / "pki"
    pki.issue(
        keys,
        "operator",
        f"/O=reward-operator-bench/CN={OPERATOR_USER}",
        [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            "extendedKeyUsage=clientAuth",
        ],
        (keys / "ca.crt", keys / "ca.key"),
    )
    kubeconfig = yaml.safe_load(Path(plane.state.kubeconfig).read_text())
    kubeconfig["users"][0]["user"] = {
        "client-certificate-data": base64.b64encode((keys / "operator.crt").read_bytes()).decode(),
        "client-key-data": base64.b64encode((keys / "operator.key").read_bytes()).decode(),
    }
    path = directory / "operator.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    objects = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": OPERATOR_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}],
        },
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": OPERATOR_USER},
            "spec": {
                "matchingPrecedence": 2,
                "priorityLevelConfiguration": {"name": "exempt"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": OPERATOR_USER}}],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": ["*"],
                                "resources": ["*"],
                                "namespaces": ["*"],
                                "clusterScope": True,
                            }
                        ],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            },
        },
    ]
    return path, objects


# ---- the API server's own metrics ------------------------------------------------------------------

_SAMPLE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class ApiCounts:
    by_request: Counter[tuple[str, str]]  # (verb, group/resource[/subresource]) -> requests
    operator: float  # requests the operator's FlowSchema dispatched

    @classmethod
    def read(cls, api: Api) -> ApiCounts:
        by_request: Counter[tuple[str, str]] = Counter()
        operator = 0.0
        for line in api.metrics().splitlines():
            match = _SAMPLE.match(line)
            if not match:
                continue
            name, labels, value = match.group(1), dict(_LABEL.findall(match.group(2))), float(match.group(3))
            if name == "apiserver_request_total":
                what = "/".join(
                    p for p in (labels.get("group"), labels.get("resource"), labels.get("subresource")) if p
                )
                by_request[(labels.get("verb", "?"), what or "(non-resource)")] += value
            elif (
                name == "apiserver_flowcontrol_dispatched_requests_total" and labels.get("flow_schema") == OPERATOR_USER
            ):
                operator += value
        return cls(by_request, operator)

    def __sub__(self, other: ApiCounts) -> ApiCounts:
        delta = Counter(self.by_request)
        delta.subtract(other.by_request)
        return ApiCounts(delta, self.operator - other.operator)

    def total(self) -> float:
        return sum(self.by_request.values())


# ---- the operator process ----------------------------------------------------------------------------


def proc_status(pid: int, key: str) -> int:
    """A /proc/<pid>/status field in kB (VmHWM, VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_operator(kubeconfig: Path, bin_dir: Path, log_path: Path, drift_interval: str) -> OperatorProcess:
    """reward-operator run, as the e2e tests start it, with the bench's own kubeconfig ('' drift: the default)."""
    operator = OperatorProcess(
        kubeconfig, log_path, bin_dir=bin_dir, command=OPERATOR_COMMAND, env={DRIFT_ENV: drift_interval or None}
    )
    return operator.start(timeout=120)


def reconcile_totals(operator: OperatorProcess) -> tuple[float, float]:
    """(reconciles finished, seconds spent in them), of every kind, from the operator's own metrics."""
    count = seconds = 0.0
    for line in operator.metrics().splitlines():
        if line.startswith("reward_operator_reconcile_total{"):
            count += float(line.rsplit(" ", 1)[1])
        elif line.startswith("reward_operator_reconcile_duration_seconds_sum{"):
            seconds += float(line.rsplit(" ", 1)[1])
    return count, seconds


# ---- one control plane -------------------------------------------------------------------------------


class Plane:
    def __init__(self, n: int, scratch: Path):
        self.directory = scratch / "plane"
        self.plane = controlplane.ControlPlane(self.directory)
        self.n = n

    def __enter__(self) -> Plane:
        started = time.monotonic()
        state = self.plane.up(kserve=True, node=False)
        try:
            self._prepare(state, started)
        except BaseException:
            self.plane.down()
            raise
        return self

    def _prepare(self, state: controlplane.State, started: float) -> None:
        keys = self.directory / "pki"
        self.api = Api(state.api_server, keys / "ca.crt", keys / "admin.crt", keys / "admin.key", CONCURRENCY + 8)
        kubectl = self.plane.kubectl
        kubectl("apply", "--server-side", "--field-manager=bench", "-f", str(REPO / "runtimes"))
        nodes = bench_nodes(self.n)
        kubectl("apply", "--server-side", "--field-manager=bench", "-f", "-", input=yaml.safe_dump_all(nodes))
        kubectl("wait", "--for=condition=Ready", "--timeout=120s", *[f"node/{n['metadata']['name']}" for n in nodes])
        kubectl("create", "namespace", NAMESPACE)
        # pods are refused until the namespace's default ServiceAccount exists
        kubectl("wait", "--for=create", "serviceaccount/default", "-n", NAMESPACE, "--timeout=60s")
        progress(f"control plane up in {time.monotonic() - started:.0f}s with {len(nodes)} extra fake GPU node(s)")

    def __exit__(self, *_: object) -> None:
        self.plane.down()


def create_all(api: Api, path: str, bodies: list[dict], resource: str) -> float:
    """POST every body from CONCURRENCY threads; returns when the last answer came (monotonic)."""

    def create(body: dict) -> None:
        api.count("POST", resource)
        api.call("POST", path, body)

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(create, bodies))
    return time.monotonic()


def fmt(seconds: float | None) -> str:
    return f"{seconds:7.1f} s" if seconds is not None else "   not reached"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "n/a"


# ---- the runs ------------------------------------------------------------------------------------------


@dataclass
class FloorResult:
    created: float
    exists: float | None
    ready: float | None
    api: ApiCounts
    own: Counter
    events: int


def run_floor(n: int) -> FloorResult:
    with tempfile.TemporaryDirectory(prefix="operator-bench-floor-") as scratch, Plane(n, Path(scratch)) as plane:
        api = plane.api
        bodies = [floor_inference_service(i) for i in range(n)]
        isvcs = Watch(api, ISVC_PATH, isvc_summary, isvc_flags)
        isvcs.start()
        isvcs.expect(n)
        before = ApiCounts.read(api)
        own_before = Counter(api.own)
        progress(f"floor: creating {n} InferenceServices from {CONCURRENCY} threads ({load()})")
        started = time.monotonic()
        created = create_all(api, ISVC_PATH, bodies, "inferenceservices") - started
        timeout = float(TIMEOUT or 300 + 1.5 * n)
        if not isvcs.wait(lambda w: "ready" in w.reached, timeout):
            progress(f"floor: not all Ready after {timeout:.0f}s: {dict(isvcs.counts)}")
        after = ApiCounts.read(api)
        own = Counter(api.own)
        own.subtract(own_before)
        isvcs.stopping = True
        reached = {flag: at - started for flag, at in isvcs.reached.items()}
        progress(f"floor: {reached} ({load()})")
        return FloorResult(created, reached.get("exists"), reached.get("ready"), after - before, own, isvcs.events)


def run_operator(n: int, floor: FloorResult | None) -> None:
    with tempfile.TemporaryDirectory(prefix="operator-bench-op-") as scratch, Plane(n, Path(scratch)) as plane:
        kubeconfig, identity = operator_identity(plane.plane, plane.directory)
        plane.plane.kubectl(
            "apply", "--server-side", "--field-manager=bench", "-f", "-", input=yaml.safe_dump_all(identity)
        )
        log_path = Path(scratch) / "operator.log"
        operator = start_operator(kubeconfig, plane.plane.bin, log_path, DRIFT_INTERVAL)
        try:
            _measure_operator(n, plane, operator, floor, kubeconfig, log_path)
        finally:
            operator.stop()
            progress(f"operator log: {log_path} ({log_problems_line(log_path)})")
            if os.environ.get("BENCH_KEEP_LOG"):
                keep = Path(os.environ["BENCH_KEEP_LOG"]) / f"operator-{n}.log"
                keep.write_bytes(log_path.read_bytes())


def _measure_operator(
    n: int, plane: Plane, operator: OperatorProcess, floor: FloorResult | None, kubeconfig: Path, log_path: Path
) -> None:
    api = plane.api
    first_drift = DRIFT_INTERVAL or str(Settings().drift_interval)
    rms = Watch(api, RM_PATH, rm_summary, rm_flags)
    isvcs = Watch(api, ISVC_PATH, isvc_summary, isvc_flags)
    for watch in (rms, isvcs):
        watch.start()
        watch.expect(n)
    rss_idle_empty = proc_status(operator.pid, "VmRSS")
    before, own_before = ApiCounts.read(api), Counter(api.own)
    reconciles_before, _ = reconcile_totals(operator)
    cpu_before = cpu_seconds(operator.pid)
    progress(f"operator: creating {n} RewardModels from {CONCURRENCY} threads ({load()})")
    load_at_start = load()
    started = time.monotonic()
    created = create_all(api, RM_PATH, [reward_model(i) for i in range(n)], "rewardmodels") - started
    timeout = float(TIMEOUT or 300 + 1.5 * n)
    done = rms.wait(lambda w: "done" in w.reached, timeout) and isvcs.wait(lambda w: "exists" in w.reached, 10)
    if not done:
        progress(f"operator: not converged after {timeout:.0f}s: RewardModels {dict(rms.counts)}")
    counts_at_end = f"RewardModels {dict(rms.counts)}, InferenceServices {dict(isvcs.counts)}"
    converged_at = time.monotonic()
    after = ApiCounts.read(api)
    own = Counter(api.own)
    own.subtract(own_before)
    reconciles_after, reconcile_seconds = reconcile_totals(operator)
    cpu_converge = cpu_seconds(operator.pid) - cpu_before
    hwm_converge = proc_status(operator.pid, "VmHWM")
    load_at_end = load()
    at = {f"rm_{k}": v - started for k, v in rms.reached.items()} | {
        f"isvc_{k}": v - started for k, v in isvcs.reached.items()
    }
    progress(f"operator: {at} ({load()})")
    reconciles = reconciles_after - reconciles_before
    delta = after - before

    # ---- convergence, printed at once (a later phase may run long)
    print(f"\nN = {n}: {n} RewardModels, one child InferenceService each (Standard mode, predictor and gateway)")
    print(f"  load at the start {load_at_start}; at convergence {load_at_end}")
    print(f"  operator: drift interval {first_drift}s at first; {log_problems_line(log_path)}")
    print("  convergence (from the first create; one watch per resource type):")
    floor_exists = floor.exists if floor else None
    floor_ready = floor.ready if floor else None
    print(f"    {'':42} {'operator':>10} {'floor':>10}  ratio")
    print(f"    {'all creates answered':42} {fmt(created)} {fmt(floor.created if floor else None)}")
    print(
        f"    {'every child InferenceService exists':42} {fmt(at.get('isvc_exists'))} {fmt(floor_exists)}"
        f"  {ratio(at.get('isvc_exists'), floor_exists)}"
    )
    print(f"    {'every status observedGeneration current':42} {fmt(at.get('rm_current'))}")
    print(
        f"    {'every InferenceService Ready (KServe)':42} {fmt(at.get('isvc_ready'))} {fmt(floor_ready)}"
        f"  {ratio(at.get('isvc_ready'), floor_ready)}"
    )
    print(
        f"    {'every RewardModel Ready, observedGeneration current':42} {fmt(at.get('rm_done'))} {fmt(floor_ready)}"
        f"  {ratio(at.get('rm_done'), floor_ready)}   <- goal <= {GOAL_RATIO}"
    )
    verdict = "n/a"
    if at.get("rm_done") and floor_ready:
        verdict = "met" if at["rm_done"] / floor_ready <= GOAL_RATIO else "NOT met"
    print(f"    goal (convergence within {GOAL_RATIO}x the floor): {verdict}")
    if not done:
        print(f"    not converged within {timeout:.0f} s; at that point: {counts_at_end}")
    wall = converged_at - started
    print(
        f"  operator during convergence: {cpu_converge:.1f} s CPU ({cpu_converge / wall * 100:.0f}% of one core "
        f"over {wall:.0f} s), {reconciles:.0f} reconciles ({reconciles / n:.1f} per RewardModel), "
        f"{reconcile_seconds:.0f} s inside reconciles in all"
    )
    print("  API requests during convergence (the API server's metrics):")
    print(
        f"    operator (its FlowSchema): {delta.operator:.0f} = "
        f"{delta.operator / max(1, reconciles):.1f} per reconcile, "
        f"{delta.operator / n:.1f} per RewardModel"
    )
    if floor:
        print(
            f"    all clients: operator run {delta.total():.0f}, floor run {floor.api.total():.0f} "
            f"({delta.total() / n:.1f} and {floor.api.total() / n:.1f} per object)"
        )
        print_breakdown(delta, own, floor.api, floor.own)
    sys.stdout.flush()

    # ---- reconcile latency for single changes while the N objects exist
    progress(f"latency: {CHANGES} spec changes one after another ({load()})")
    child_ms, status_ms, missed = [], [], 0
    lat_before, lat_reconciles_before = ApiCounts.read(api), reconcile_totals(operator)[0]
    latency_deadline = time.monotonic() + LATENCY_BUDGET_S
    for k in range(CHANGES):
        if time.monotonic() > latency_deadline:
            progress(f"latency: stopped after {k} changes, past BENCH_LATENCY_BUDGET_S ({LATENCY_BUDGET_S:.0f} s)")
            break
        name = f"rm-{(k * 7919) % n:04d}"
        current = rms.objects[name]["max"]
        new = 3 if current == 2 else 2
        started_change = time.monotonic()
        patched = api.call(
            "PATCH",
            f"{RM_PATH}/{name}",
            {"spec": {"serving": {"maxReplicas": new}}},
            content_type="application/merge-patch+json",
        )
        api.count("PATCH", "rewardmodels")
        generation = patched["metadata"]["generation"]

        def child_changed(w: Watch, name: str = name, new: int = new) -> bool:
            return (w.objects.get(name) or {}).get("max") == new

        def status_caught_up(w: Watch, name: str = name, generation: int = generation) -> bool:
            return ((w.objects.get(name) or {}).get("observed") or 0) >= generation

        change_deadline = started_change + 120
        if isvcs.wait(child_changed, 120) and rms.wait(status_caught_up, max(0.0, change_deadline - time.monotonic())):
            child_ms.append((isvcs.changed[name]["max"] - started_change) * 1000)
            status_ms.append((rms.changed[name]["observed"] - started_change) * 1000)
        else:
            missed += 1
    lat_delta = ApiCounts.read(api) - lat_before
    lat_reconciles = reconcile_totals(operator)[0] - lat_reconciles_before

    print(f"  reconcile latency, {len(child_ms)} single spec changes (maxReplicas) one after another, {missed} missed:")
    if child_ms:
        for title, values in (("child InferenceService changed", child_ms), ("status observedGeneration", status_ms)):
            values.sort()
            p50, p99 = values[len(values) // 2], values[min(len(values) - 1, int(0.99 * len(values)))]
            print(f"    {title:32} p50 {p50:6.0f} ms   p99 {p99:6.0f} ms   max {values[-1]:6.0f} ms")
        print(
            f"    API requests: operator {lat_delta.operator / max(1, len(child_ms)):.1f} per change, "
            f"{lat_reconciles / max(1, len(child_ms)):.1f} reconciles per change "
            "(the RewardModel's update and its child's events)"
        )
    sys.stdout.flush()

    # ---- idle with N objects
    wait_until_quiet(operator)  # the last change's KServe follow-ups settle
    # KServe's controller writes each InferenceService's status again minutes after it is Ready (its
    # model's state), and every write is a watch event the operator reads: idle is measured once the
    # workloads' writes have stopped, and the wait is printed
    wait_until_workloads_settle(api)
    idle = measure_idle(api, operator)
    hwm_end = proc_status(operator.pid, "VmHWM")
    rss_end = proc_status(operator.pid, "VmRSS")

    print("  memory:")
    rss_verdict = "met" if hwm_end / 1024 <= GOAL_RSS_MB else "NOT met"
    print(
        f"    RSS before any object {rss_idle_empty / 1024:.0f} MB; "
        f"peak (VmHWM) at convergence {hwm_converge / 1024:.0f} MB, "
        f"at the end {hwm_end / 1024:.0f} MB (goal <= {GOAL_RSS_MB} MB: {rss_verdict}); "
        f"RSS now {rss_end / 1024:.0f} MB"
    )
    print_idle(f"idle with {n} objects, drift interval {first_drift}s", idle, n)
    sys.stdout.flush()

    # ---- restart with a long drift interval: resume, then idle again
    restart = None
    if ALT_DRIFT:
        operator.stop()
        progress(f"restart with drift interval {ALT_DRIFT}s ({load()})")
        restart_before = ApiCounts.read(api)
        restarted_at = time.monotonic()
        operator.set_env({DRIFT_ENV: ALT_DRIFT})
        operator.start(timeout=120)
        # Resume reconciles every RewardModel, and the first listing of the children
        # reconciles each owner once more: done when the count has stood still for 5 s.
        resumed, last_count, last_change = None, -1.0, time.monotonic()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            count = reconcile_totals(operator)[0]
            if count != last_count:
                last_count, last_change = count, time.monotonic()
            elif count >= n and time.monotonic() - last_change >= 5:
                resumed = last_change - restarted_at
                break
            time.sleep(0.5)  # noqa: TID251 the pause between two reads of the operator's metrics
        resume_counts = ApiCounts.read(api) - restart_before
        resume_reconciles = reconcile_totals(operator)[0]
        wait_until_quiet(operator)
        restart = (resumed, resume_counts, resume_reconciles, measure_idle(api, operator))
        restart_hwm = proc_status(operator.pid, "VmHWM")

    if restart:
        resumed, resume_counts, resume_reconciles, idle2 = restart
        print(
            f"  restart with drift interval {ALT_DRIFT}s: {resume_reconciles:.0f} resume reconciles "
            f"in {fmt(resumed).strip()}, {resume_counts.operator:.0f} operator API requests "
            f"({resume_counts.operator / max(1, resume_reconciles):.1f} per reconcile); "
            f"peak RSS {restart_hwm / 1024:.0f} MB"
        )
        print_idle(f"idle with {n} objects, drift interval {ALT_DRIFT}s", idle2, n)
    sys.stdout.flush()


def log_problems_line(log_path: Path) -> str:
    text = log_path.read_text(errors="replace")
    return (
        f"its log has {text.count('Traceback')} tracebacks and {len(re.findall(r'ERROR', text))} ERROR lines; "
        f"kopf ran the create handler {text.count('Creation is processed')} times, "
        f"the drift timer {text.count('drift_backstop')} times"
    )


@dataclass
class Idle:
    seconds: float
    cpu: float
    reconciles: float
    api: ApiCounts


def wait_until_quiet(operator: OperatorProcess, quiet_s: float = 5.0, timeout_s: float = 120.0) -> None:
    """Return once the operator has finished no reconcile for quiet_s (or after timeout_s)."""
    last, since = -1.0, time.monotonic()
    deadline = since + timeout_s
    while time.monotonic() < deadline:
        count = reconcile_totals(operator)[0]
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.5)  # noqa: TID251 the pause between two reads of the operator's metrics


# Writes to the objects the operator watches (not leases, events or nodes, which never stop).
WORKLOAD_GROUPS = ("serving.kserve.io/", "apps/", "serving.rlhf.dev/", "autoscaling/")
WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")
SETTLE_MAX_S = float(os.environ.get("BENCH_SETTLE_MAX_S", "900"))


def workload_writes(api: Api) -> float:
    counts = ApiCounts.read(api).by_request
    return sum(v for (verb, what), v in counts.items() if verb in WRITE_VERBS and what.startswith(WORKLOAD_GROUPS))


def wait_until_workloads_settle(api: Api, window_s: float = 30.0, below_per_s: float = 0.5) -> None:
    """Return once the workloads took fewer than ``below_per_s`` writes a second over ``window_s``
    (or after SETTLE_MAX_S), printing how long that took."""
    started = time.monotonic()
    while True:
        before = workload_writes(api)
        time.sleep(window_s)  # noqa: TID251 a rate is counted over a span
        rate = (workload_writes(api) - before) / window_s
        waited = time.monotonic() - started
        if rate < below_per_s or waited >= SETTLE_MAX_S:
            verdict = "settled" if rate < below_per_s else f"not settled within {SETTLE_MAX_S:.0f} s"
            print(
                f"  the workloads' writes {verdict} after {waited:.0f} s: "
                f"{rate:.1f} writes/s over the last {window_s:.0f} s"
            )
            return
        progress(f"the workloads still take {rate:.1f} writes/s ({load()})")


def measure_idle(api: Api, operator: OperatorProcess) -> Idle:
    progress(f"idle: {IDLE_S:.0f} s ({load()})")
    before, reconciles_before = ApiCounts.read(api), reconcile_totals(operator)[0]
    cpu_before = cpu_seconds(operator.pid)
    started = time.monotonic()
    time.sleep(IDLE_S)  # noqa: TID251 idleness is what is measured, over a fixed span
    cpu, seconds = cpu_seconds(operator.pid) - cpu_before, time.monotonic() - started
    return Idle(seconds, cpu, reconcile_totals(operator)[0] - reconciles_before, ApiCounts.read(api) - before)


def print_idle(title: str, idle: Idle, n: int) -> None:
    percent = idle.cpu / idle.seconds * 100
    verdict = "met" if percent < GOAL_IDLE_CPU else "NOT met"
    print(
        f"  {title}: CPU {percent:.2f}% of one core over {idle.seconds:.0f} s (goal < {GOAL_IDLE_CPU}%: {verdict}); "
        f"{idle.reconciles:.0f} reconciles, {idle.api.operator:.0f} operator API requests "
        f"({idle.api.operator / idle.seconds:.1f}/s), all clients {idle.api.total() / idle.seconds:.0f}/s ({load()})"
    )


def print_breakdown(op: ApiCounts, op_own: Counter, floor: ApiCounts, floor_own: Counter) -> None:
    """Requests by verb and resource: operator run less floor run, each less the bench's own requests."""
    print("    by verb and resource, operator run less floor run (the bench's own requests taken out of each;")
    print("    leases, nodes and events follow the runs' lengths, not the operator):")

    def key_own(own: Counter) -> Counter:
        mapped: Counter = Counter()
        for (verb, path), count in own.items():
            if "inferenceservices" in path:
                mapped[(verb, "serving.kserve.io/inferenceservices")] += count
            elif "rewardmodels" in path:
                mapped[(verb, f"{GROUP}/rewardmodels")] += count
        return mapped

    a, b = Counter(op.by_request), Counter(floor.by_request)
    a.subtract(key_own(op_own))
    b.subtract(key_own(floor_own))
    rows = []
    for key in set(a) | set(b):
        diff = a[key] - b[key]
        if abs(diff) >= 5:
            rows.append((diff, key, a[key], b[key]))
    rows.sort(reverse=True)
    print(f"      {'verb':8} {'resource':48} {'operator run':>12} {'floor run':>10} {'difference':>10}")
    for diff, (verb, what), x, y in rows[:25]:
        print(f"      {verb:8} {what:48} {x:12.0f} {y:10.0f} {diff:10.0f}")


def main() -> None:
    # Stopped from outside (SIGTERM, or SIGINT even where a background shell ignores it),
    # the `finally` blocks still stop the operator and the control planes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print(f"Operator benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"Machine: {machine()}; {load()}")
    if os.environ.get("BENCH_OPERATOR_COMMAND"):
        print(f"Operator command: {shlex.join(OPERATOR_COMMAND)} (BENCH_OPERATOR_COMMAND)")
    print(
        f"N = {','.join(map(str, SIZES))}; {CONCURRENCY} concurrent creators; {CHANGES} changes for latency; "
        f"idle {IDLE_S:.0f} s; KServe's controller running; each run on a fresh control plane"
    )
    for n in SIZES:
        floor = run_floor(n) if "floor" in PHASES else None
        if floor:
            print(
                f"\nN = {n} floor: {n} InferenceServices created directly, {CONCURRENCY} threads: all created "
                f"{fmt(floor.created).strip()}, all exist {fmt(floor.exists).strip()}, "
                f"all Ready {fmt(floor.ready).strip()}; "
                f"{floor.api.total():.0f} API requests from all clients; {floor.events} watch events"
            )
            sys.stdout.flush()
        if "operator" in PHASES:
            run_operator(n, floor)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"\nThe bench process itself used {usage.ru_utime + usage.ru_stime:.0f} s of CPU (watches, creates).")


if __name__ == "__main__":
    main()
