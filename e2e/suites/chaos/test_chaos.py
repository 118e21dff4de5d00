"""Chaos tests: the operator under kills, restarts, stalled watches and a second replica.

Each test brings a control plane of its own (``ControlPlane.up``) and restarts or
stalls its components, so no other test shares what it breaks. KServe's manager
stays out (``kserve=False``): none of these tests needs KServe to report Ready,
and 200 InferenceServices with a GPU each would not fit kwok's 16 fake GPUs
anyway; convergence here means that every RewardModel has its InferenceService
(owned by it alone) and a status for its current generation.

The operator runs as its own process, exactly as ``reward-operator run`` runs it,
with its timers as shipped: the drift backstop of an hour never fires within a test,
so whatever converges did so through the watches, kopf's resume handling and the
re-check of unsettled objects (30 s). Every wait is on a
signal (the API server's objects, the operator's metrics and log, a process
exiting); each test has its own timeout, and prints its counts.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from reward_operator.cluster.client import REQUEST_TIMEOUT
from reward_operator.controllers.runner import RETRY_DELAY
from reward_operator.peering import pod_priority
from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv import chart
from testenv.helpers import condition
from testenv.operator_process import DRIFT_ENV, OperatorProcess
from testenv.plane.controlplane import ControlPlane

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("E2E_KUBECONFIG")),
    reason="chaos tests restart control-plane processes: they need the local control plane (e2e/testenv)",
)

GROUP, VERSION, PLURAL = "serving.rlhf.dev", "v1alpha1", "rewardmodels"
ISVC_GROUP, ISVC_VERSION, ISVC_PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
NAMESPACE = "chaos"
SAMPLE = yaml.safe_load((REPO / "manifests/samples/rewardmodel-sequence-standard.yaml").read_text())
# kopf's annotations on our objects: the diff base it keeps, and per-handler progress while a handler runs
HANDLED = f"{GROUP}/last-handled-configuration"
FINALIZER = f"{GROUP}/reward-operator"
# kopf's annotations that stay on a handled object (the diff base, and its marker of objects it manages);
# any other annotation of kopf's prefix is a handler's progress, present only while that handler is unfinished
KOPF_PERMANENT = {HANDLED, f"{GROUP}/kopf-managed"}

OBJECTS = int(os.environ.get("CHAOS_OBJECTS", "200"))
CREATE_WORKERS = 8
CREATE_LEAD = 50  # how far the creations of the kill test may run ahead of the operator


def log(message: str) -> None:
    print(f"[chaos] {message}", flush=True)


# ---- the pieces every test uses ------------------------------------------------------------------


@pytest.fixture
def plane() -> Iterator[ControlPlane]:
    """A control plane of this test's own (no KServe), with the reward runtimes and the namespace."""
    with tempfile.TemporaryDirectory(prefix="reward-operator-chaos-") as scratch:
        plane = ControlPlane(Path(scratch) / "plane")
        plane.up(kserve=False, node=False)
        try:
            plane.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", str(REPO / "runtimes"))
            plane.kubectl("create", "namespace", NAMESPACE)
            yield plane
        finally:
            plane.down()


def api_of(kubeconfig: str) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = CREATE_WORKERS * 2
    return k8s.ApiClient(configuration)


def chaos_operator(
    name: str, kubeconfig: str, directory: Path, *args: str, drift: str | None = "3600"
) -> OperatorProcess:
    """reward-operator as its own process, killable and restartable; its log (``<name>.log``) accumulates
    over restarts. ``drift``: REWARD_OPERATOR_DRIFT_INTERVAL; None: the operator's default (an hour, as
    "3600": the backstop never fires within a test, so what converges did so through the watches, kopf's
    resume handling and the re-check of unsettled objects)."""
    return OperatorProcess(
        kubeconfig, directory / f"{name}.log", args=args or ("--standalone",), env={DRIFT_ENV: drift}, name=name
    )


@pytest.fixture
def operators() -> Iterator[list[OperatorProcess]]:
    """Operators a test starts (append them); each is stopped afterwards and its counts printed
    (E2E_SHOW_OPERATOR_LOG=1 prints its whole log)."""
    started: list[OperatorProcess] = []
    yield started
    for operator in started:
        operator.stop()
        errors = operator.log_lines("Traceback", "ERROR")
        log(f"{operator.name}: {operator.starts} start(s), {operator.kills} kill(s), {len(errors)} error line(s)")
        if os.environ.get("E2E_SHOW_OPERATOR_LOG"):
            print(operator.log())


def manifest(name: str, **spec: Any) -> dict:
    body = json.loads(json.dumps(SAMPLE))
    body["metadata"] = {"name": name, "namespace": NAMESPACE}
    body["spec"].update(spec)
    return body


def create(custom: k8s.CustomObjectsApi, name: str, **spec: Any) -> None:
    custom.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, manifest(name, **spec), _request_timeout=60
    )


def patch_max_model_len(plane: ControlPlane, name: str, value: int) -> None:
    patch = json.dumps({"spec": {"model": {"maxModelLen": value}}})
    plane.kubectl("patch", "rewardmodel", name, "-n", NAMESPACE, "--type=merge", "-p", patch)


def reward_models(custom: k8s.CustomObjectsApi) -> dict[str, dict]:
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, _request_timeout=30)
    return {item["metadata"]["name"]: item for item in listed["items"]}


def inference_services(custom: k8s.CustomObjectsApi) -> dict[str, dict]:
    listed = custom.list_namespaced_custom_object(ISVC_GROUP, ISVC_VERSION, NAMESPACE, ISVC_PLURAL, _request_timeout=30)
    return {item["metadata"]["name"]: item for item in listed["items"]}


def status_current(obj: dict) -> bool:
    """A status for the object's current generation, at the root and on Ready."""
    generation = obj["metadata"]["generation"]
    ready = condition(obj) or {}
    return (obj.get("status") or {}).get("observedGeneration") == generation and ready.get(
        "observedGeneration"
    ) == generation


def max_model_len(isvc: dict | None) -> int | None:
    args = (isvc or {}).get("spec", {}).get("predictor", {}).get("model", {}).get("args", [])
    found = [arg.split("=", 1)[1] for arg in args if arg.startswith("--max-model-len=")]
    return int(found[0]) if found else None


def unconverged(custom: k8s.CustomObjectsApi, expected: dict[str, int | None]) -> list[str]:
    """Names in ``expected`` (name -> maxModelLen its InferenceService must carry, None: any) not yet
    converged: the RewardModel exists with a current status, its InferenceService renders its spec."""
    rms, isvcs = reward_models(custom), inference_services(custom)
    pending = []
    for name, length in expected.items():
        rm, isvc = rms.get(name), isvcs.get(name)
        stale = length is not None and max_model_len(isvc) != length
        if rm is None or isvc is None or not status_current(rm) or stale:
            pending.append(name)
    return pending


def wait_converged(custom: k8s.CustomObjectsApi, expected: dict[str, int | None], what: str, timeout: float) -> float:
    """Seconds until every object in ``expected`` converged; fails naming the ones that did not."""
    started = time.monotonic()
    last: list[str] = []

    def done() -> bool:
        nonlocal last
        last = unconverged(custom, expected)
        return not last

    try:
        wait_until(what, done, timeout=timeout, interval=0.5)
    except AssertionError as error:
        raise AssertionError(f"{error}; {len(last)} not converged, e.g. {last[:5]}") from None
    return time.monotonic() - started


def ownership_problems(plane: ControlPlane, custom: k8s.CustomObjectsApi) -> tuple[list[str], dict[str, int]]:
    """Every child with our label owned (as controller) by exactly one existing RewardModel of its name,
    one InferenceService per RewardModel; returns the problems and the children counted by kind."""
    rms = reward_models(custom)
    by_uid = {rm["metadata"]["uid"]: name for name, rm in rms.items()}
    problems: list[str] = []
    children: dict[str, int] = {}
    isvcs_per_owner: collections.Counter[str] = collections.Counter()
    kinds = {
        "InferenceService": list(inference_services(custom).values()),
        **{
            kind: json.loads(
                plane.kubectl(
                    "get", resource, "-n", NAMESPACE, "-l", "app.kubernetes.io/managed-by=reward-operator", "-o", "json"
                ).stdout
            )["items"]
            for kind, resource in (("ConfigMap", "configmaps"), ("NetworkPolicy", "networkpolicies"))
        },
    }
    for kind, items in kinds.items():
        children[kind] = len(items)
        for item in items:
            name = item["metadata"]["name"]
            controllers = [ref for ref in item["metadata"].get("ownerReferences", []) if ref.get("controller")]
            if len(controllers) != 1:
                problems.append(f"{kind} {name}: {len(controllers)} controller references")
                continue
            owner = by_uid.get(controllers[0]["uid"])
            if owner is None:
                problems.append(f"{kind} {name}: orphan, owner uid {controllers[0]['uid']} is no RewardModel")
            elif kind == "InferenceService":
                isvcs_per_owner[owner] += 1
                if name != owner:
                    problems.append(f"InferenceService {name} is owned by RewardModel {owner}")
    for name in rms:
        if isvcs_per_owner[name] != 1:
            problems.append(f"RewardModel {name} has {isvcs_per_owner[name]} InferenceServices")
    return problems, children


def status_problems(custom: k8s.CustomObjectsApi, bookkeeping: bool = True) -> list[str]:
    """Lost or stale status; with ``bookkeeping``, also kopf's own left half-way (a progress annotation,
    no diff base, no finalizer)."""
    problems = []
    for name, rm in reward_models(custom).items():
        annotations = rm["metadata"].get("annotations") or {}
        if not status_current(rm):
            problems.append(f"{name}: status {rm.get('status')} for generation {rm['metadata']['generation']}")
        if not bookkeeping:
            continue
        if HANDLED not in annotations:
            problems.append(f"{name}: kopf never recorded a handled configuration")
        progress = sorted(key for key in annotations if key.startswith(f"{GROUP}/") and key not in KOPF_PERMANENT)
        if progress:
            problems.append(f"{name}: kopf progress annotations left: {progress}")
        if FINALIZER not in (rm["metadata"].get("finalizers") or []):
            problems.append(f"{name}: no finalizer")
    return problems


# ---- 1. kill -9 while 200 RewardModels are created -------------------------------------------------


@pytest.mark.timeout(600)
def test_operator_killed_during_a_mass_create_converges_without_duplicates_or_orphans(plane, operators, tmp_path):
    assert plane.state is not None
    custom = k8s.CustomObjectsApi(api_of(plane.state.kubeconfig))
    operator = chaos_operator("operator", plane.state.kubeconfig, tmp_path)
    operators.append(operator)
    operator.start()
    first_pid = operator.pid
    names = [f"rm-{index:03d}" for index in range(OBJECTS)]

    # The creations run ahead of the operator by at most CREATE_LEAD objects (a gate on the children it has
    # made, not a rate), so that when half have children the rest are still being created: some during
    # the kill, some while no operator runs, some while the new one starts.
    kill_at = OBJECTS // 2
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CREATE_WORKERS) as pool:
        creations: list[concurrent.futures.Future] = []
        children = 0
        for index, name in enumerate(names):
            if index - CREATE_LEAD >= children:
                children = wait_until(
                    f"the operator within {CREATE_LEAD} objects of the creations ({index} submitted)",
                    lambda floor=index - CREATE_LEAD: (made := len(inference_services(custom))) > floor and made,
                    timeout=120,
                    interval=0.2,
                )
            if children >= kill_at:
                break
            creations.append(pool.submit(create, custom, name))
        wait_until(
            f"{kill_at} of {OBJECTS} RewardModels with an InferenceService",
            lambda: len(inference_services(custom)) >= kill_at,
            timeout=120,
            interval=0.2,
        )
        operator.kill()
        killed_at = time.monotonic() - started
        created_at_kill = sum(creation.done() for creation in creations)
        children_at_kill = len(inference_services(custom))
        statuses_at_kill = sum(status_current(rm) for rm in reward_models(custom).values())
        # the rest of the 200 at once, while no operator runs and while the new one starts
        creations += [pool.submit(create, custom, name) for name in names[len(creations) :]]
        operator.start()
        for creation in creations:
            creation.result()
    assert operator.pid != first_pid
    log(
        f"kill -9 after {killed_at:.1f}s: {created_at_kill}/{OBJECTS} RewardModels created "
        f"({OBJECTS - created_at_kill} more from then on), "
        f"{children_at_kill} InferenceServices, {statuses_at_kill} statuses current; restarted as pid {operator.pid}"
    )

    converged_in = wait_converged(
        custom, dict.fromkeys(names), f"all {OBJECTS} RewardModels to converge after the restart", timeout=400
    )
    assert operator.alive()
    ownership, children = ownership_problems(plane, custom)
    assert not ownership, ownership[:20]
    lost = status_problems(custom)
    assert not lost, lost[:20]
    rms = reward_models(custom)
    reasons = collections.Counter((condition(rm) or {}).get("reason") for rm in rms.values())
    log(
        f"{len(rms)} RewardModels, children {children}, Ready reasons {dict(reasons)}; "
        f"{operator.kills} kill(s), {operator.starts - 1} restart(s); converged {converged_in:.1f}s after the restart "
        f"({time.monotonic() - started:.1f}s in all); {operator.reconciles():.0f} reconciles by the restarted operator"
    )


# ---- 2. kube-apiserver, then etcd, restarted under a running operator --------------------------------


@pytest.mark.timeout(480)
@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_operator_recovers_from_a_restart_of(component, plane, operators, tmp_path):
    """The operator as shipped (its timers at their defaults: the hourly drift backstop, the re-check
    of unsettled objects) rides out a restart of the component."""
    assert plane.state is not None
    custom = k8s.CustomObjectsApi(api_of(plane.state.kubeconfig))
    operator = chaos_operator("operator", plane.state.kubeconfig, tmp_path, drift=None)
    operators.append(operator)
    operator.start()
    pid = operator.pid
    create(custom, "before")
    wait_converged(custom, {"before": 16384}, "the first RewardModel", timeout=60)

    # a burst in flight when the component goes: the operator is mid-reconcile
    burst = [f"burst-{index:02d}" for index in range(20)]
    with concurrent.futures.ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(lambda name: create(custom, name), burst))
    in_flight = len(unconverged(custom, dict.fromkeys(burst)))
    restart_started = time.monotonic()
    new_pid = plane.restart(component)
    wait_until(
        "the API server ready again",
        lambda: plane.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
        timeout=90,
    )
    down_for = time.monotonic() - restart_started
    log(f"{component} restarted (pid {new_pid}) and ready after {down_for:.1f}s; {in_flight}/20 of the burst pending")

    # changes made after the restart
    patch_max_model_len(plane, "before", 8192)
    create(custom, "after")
    expected = {"before": 8192, "after": 16384, **dict.fromkeys(burst)}
    # a handler that failed while the component was down is retried by kopf after its delay; an object
    # kopf leaves unhandled (its finalizer patch lost to a conflict) is re-checked within 30 s
    converged_in = wait_converged(custom, expected, f"convergence after the {component} restart", timeout=180)
    assert operator.alive() and operator.pid == pid, f"the operator restarted or exited:\n{operator.log()[-4000:]}"
    ownership, children = ownership_problems(plane, custom)
    assert not ownership, ownership
    lost = status_problems(custom, bookkeeping=False)
    assert not lost, lost
    retried = operator.log_lines("will retry", "Traceback")
    log(
        f"{component} restart: {len(expected)} RewardModels, children {children}, converged {converged_in:.1f}s "
        f"after it was ready again; operator pid {pid} unchanged; {len(retried)} retry/traceback log lines"
    )


# ---- 3. a watch that stalls silently --------------------------------------------------------------


@dataclass
class _Connection:
    hold: asyncio.Future
    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]
    stalled: bool = False
    open: bool = True


@dataclass
class StallingProxy:
    """A TCP proxy between the operator and the API server (TLS passes through untouched).

    ``stall()`` freezes every connection open at that moment: from then on not one
    byte, not even the FIN of a closing end, is forwarded either way, and both
    sockets stay open. That is a dead NAT entry or a partitioned load balancer as
    the client sees it: no error, just silence. Connections made after the stall
    are forwarded as usual, so a client that notices and reconnects gets through.
    """

    upstream_port: int
    port: int = 0
    accepted: int = 0
    accepted_at_stall: int = 0
    _connections: list[_Connection] = field(default_factory=list)
    _tasks: set[asyncio.Task] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        listening = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(listening,), name="stalling-proxy", daemon=True)
        self._thread.start()
        assert listening.wait(10), "the proxy did not start"

    def _run(self, listening: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        listening.set()
        self._loop.run_forever()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        conn = _Connection(self._loop.create_future(), (client_writer, upstream_writer))
        self._connections.append(conn)
        await asyncio.gather(
            self._pump(conn, client_reader, upstream_writer), self._pump(conn, upstream_reader, client_writer)
        )
        conn.open = False

    async def _pump(self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if conn.stalled:
                    await conn.hold  # these bytes (or this end's FIN) never arrive; nothing is closed
                    return
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        if not conn.stalled:
            writer.close()

    def stall(self) -> int:
        """Freeze the connections open now; returns how many."""

        async def freeze() -> int:
            frozen = [conn for conn in self._connections if conn.open]
            for conn in frozen:
                conn.stalled = True
            self.accepted_at_stall = self.accepted
            return len(frozen)

        return asyncio.run_coroutine_threadsafe(freeze(), self._loop).result(timeout=10)

    @property
    def connections_since_stall(self) -> int:
        return self.accepted - self.accepted_at_stall

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            for conn in self._connections:
                if not conn.hold.done():
                    conn.hold.set_result(None)
                for writer in conn.writers:
                    writer.transport.abort()
            pending = [task for task in self._tasks if not task.done()]
            if pending:
                await asyncio.wait(pending, timeout=5)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


@pytest.fixture
def proxied_kubeconfig(plane, tmp_path) -> Iterator[tuple[str, StallingProxy]]:
    assert plane.state is not None
    proxy = StallingProxy(plane.state.ports["apiserver"])
    config = yaml.safe_load(Path(plane.state.kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = tmp_path / "kubeconfig-through-proxy"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    try:
        yield str(path), proxy
    finally:
        proxy.close()


# kopf's inactivity_timeout: a watch stream with no event (bookmarks included) for this long is
# dropped and re-established. The operator keeps kopf's default (controllers/__init__.py sets only
# server_timeout), so the default is what it runs with.
INACTIVITY_TIMEOUT = kopf.OperatorSettings().watching.inactivity_timeout
STALL_SLACK = 30  # a reconnect, kopf's re-list, one reconcile, on a busy 2-core machine
# The operator's first request after the stall can go out on a kept-alive connection the stall froze
# too: it costs one read timeout, then the handler's retry delay, before a fresh connection answers.
FROZEN_REQUEST = REQUEST_TIMEOUT[1] + RETRY_DELAY
# kopf's debug line when it drops a watch for inactivity (hence the operator runs with -v here)
INACTIVE_WATCH = "Watch-stream for rewardmodels.v1alpha1.serving.rlhf.dev cluster-wide is inactive, reconnecting."
# the operator's on.event handler: runs on every watch event of a RewardModel, with no API call of its own
EVENT_SEEN = "Handler 'register.<locals>.reward_model_event' succeeded."


def _operator_behind_a_stall(plane, operators, proxied_kubeconfig, tmp_path) -> tuple[OperatorProcess, StallingProxy]:
    """An operator talking to the API server through the proxy, one RewardModel converged."""
    kubeconfig, proxy = proxied_kubeconfig
    custom = k8s.CustomObjectsApi(api_of(plane.state.kubeconfig))  # the test itself goes straight to the API server
    operator = chaos_operator("operator", kubeconfig, tmp_path, "--standalone", "-v")
    operators.append(operator)
    operator.start()
    create(custom, "stalled")
    wait_converged(custom, {"stalled": 16384}, "the RewardModel before the stall", timeout=60)

    def idle() -> bool:
        """kopf's bookkeeping written, and every handler invoked so far finished (-v logs both ends)."""
        stored = reward_models(custom).get("stalled") or {}
        started = len(operator.log_lines("' is invoked."))
        ended = len(operator.log_lines("' succeeded.", "' failed"))
        return HANDLED in (stored.get("metadata", {}).get("annotations") or {}) and started == ended

    # the stall then catches no request in flight: what it shows is the watches going silent
    wait_until("the operator idle before the stall", idle, timeout=60)
    return operator, proxy


@pytest.mark.timeout(300)
def test_a_silently_stalled_watch_is_detected_and_reestablished(plane, operators, proxied_kubeconfig, tmp_path):
    """kopf drops a watch that has gone silent and opens a new one, which delivers what it missed."""
    operator, proxy = _operator_behind_a_stall(plane, operators, proxied_kubeconfig, tmp_path)
    events_before = len(operator.log_lines(EVENT_SEEN))
    frozen = proxy.stall()
    stalled_at = time.monotonic()
    patch_max_model_len(plane, "stalled", 8192)  # made during the stall: the frozen watch never carries it
    bound = INACTIVITY_TIMEOUT + STALL_SLACK
    try:
        wait_until(
            "kopf to drop the silent RewardModel watch", lambda: operator.log_lines(INACTIVE_WATCH), timeout=bound
        )
        detected_in = time.monotonic() - stalled_at
        wait_until(
            "the re-established watch to deliver the change made during the stall",
            lambda: len(operator.log_lines(EVENT_SEEN)) > events_before,
            timeout=stalled_at + bound - time.monotonic(),
        )
    except AssertionError as error:
        raise AssertionError(
            f"{error}\n{frozen} connections frozen, {proxy.connections_since_stall} made since the stall; "
            f"operator log:\n{operator.log()[-6000:]}"
        ) from None
    delivered_in = time.monotonic() - stalled_at
    assert proxy.connections_since_stall > 0
    assert operator.alive()
    log(
        f"stall: {frozen} connections frozen; the silent watch was dropped after {detected_in:.1f}s "
        f"(inactivity_timeout {INACTIVITY_TIMEOUT:.0f}s) and the change made during the stall delivered by the new "
        f"watch after {delivered_in:.1f}s, over {proxy.connections_since_stall} new connection(s)"
    )


@pytest.mark.timeout(300)
def test_a_change_made_during_a_silent_stall_is_reconciled_within_the_inactivity_window(
    plane, operators, proxied_kubeconfig, tmp_path
):
    operator, proxy = _operator_behind_a_stall(plane, operators, proxied_kubeconfig, tmp_path)
    custom = k8s.CustomObjectsApi(api_of(plane.state.kubeconfig))
    reconciles_before = operator.reconciles()
    frozen = proxy.stall()
    stalled_at = time.monotonic()
    patch_max_model_len(plane, "stalled", 8192)
    bound = INACTIVITY_TIMEOUT + FROZEN_REQUEST + STALL_SLACK
    try:
        detected_in = wait_converged(
            custom, {"stalled": 8192}, f"the change made during the stall, within {bound:.0f}s", timeout=bound
        )
    except AssertionError as error:
        hung = [line for line in operator.log().splitlines() if "Handler" in line and "failed" in line]
        raise AssertionError(
            f"{error}\n{frozen} connections frozen, {proxy.connections_since_stall} made since the stall; "
            f"dropped the silent watch: {bool(operator.log_lines(INACTIVE_WATCH))}; handler failures: {hung[:3]}"
        ) from None
    log(
        f"{frozen} connections frozen; the change made during the stall was reconciled {detected_in:.1f}s later "
        f"(inactivity_timeout {INACTIVITY_TIMEOUT:.0f}s), over {proxy.connections_since_stall} new connections; "
        f"reconciles retried after a read timeout on a frozen connection: "
        f"{sum('ReadTimeoutError' in line for line in operator.log_lines('failed temporarily'))}"
    )
    assert operator.reconciles() > reconciles_before

    # the re-established watch delivers the next change at once (no further inactivity window)
    patch_max_model_len(plane, "stalled", 4096)
    again_in = wait_converged(custom, {"stalled": 4096}, "a change after the watch was re-established", timeout=20)
    assert operator.alive()
    log(f"the next change was reconciled in {again_in:.1f}s; {time.monotonic() - stalled_at:.1f}s since the stall")


# ---- 4. two replicas with kopf's peering, as the chart runs them: exactly one acts, the other takes over --

RELEASE = "reward-operator"
KOPF = "kopf.dev"  # the API group of kopf's peering kinds
# what a Deployment names its pods: <deployment>-<pod-template-hash>-<suffix>
POD_NAMES = [f"{RELEASE}-5d8f6b7c9-{suffix}" for suffix in ("k2x7q", "p9w4m")]
# a Go operator's leader lease: what the hand-over is measured against (printed, not asserted)
GO_LEASE_SECONDS = 15


@dataclass
class ChartReplicas:
    """What `helm install --set replicas=2` runs: kopf's peering CRDs (crds/), the peering object, and
    each pod's operator command line and environment."""

    crds: list[dict]
    peering: dict
    args: list[str]
    env: list[dict]
    lifetime: int

    @classmethod
    def render(cls) -> ChartReplicas:
        docs = chart.render("--set=replicas=2", release=RELEASE)
        (deployment,) = (doc for doc in docs if doc["kind"] == "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"][0] == "run"
        # the pod's liveness address is the process's own here (OperatorProcess), as is its metrics port
        args = [arg for arg in container["args"][1:] if not arg.startswith("--liveness=")]
        (lifetime,) = (int(arg.split("=", 1)[1]) for arg in args if arg.startswith("--peering-lifetime="))
        return cls(
            crds=[doc for doc in docs if doc["kind"] == "CustomResourceDefinition" and doc["spec"]["group"] == KOPF],
            peering=next(doc for doc in docs if doc["kind"] == "ClusterKopfPeering"),
            args=args,
            env=container["env"],
            lifetime=lifetime,
        )

    def pod_env(self, pod_name: str) -> dict[str, str | None]:
        """The pod's environment as the kubelet would fill it in (the downward API's pod name)."""
        env: dict[str, str | None] = {}
        for variable in self.env:
            name = variable["name"]
            if name == "REWARD_OPERATOR_METRICS_PORT":
                continue  # two processes share this host: each keeps the free port OperatorProcess chose
            source = variable.get("valueFrom")
            if source is None:
                env[name] = variable["value"]
            else:
                assert source == {"fieldRef": {"fieldPath": "metadata.name"}}, f"{name}: {source} (teach the test)"
                env[name] = pod_name
        return env

    def pod(self, pod_name: str, kubeconfig: str, directory: Path) -> OperatorProcess:
        return OperatorProcess(
            kubeconfig, directory / f"{pod_name}.log", args=self.args, env=self.pod_env(pod_name), name=pod_name
        )


def peers(custom: k8s.CustomObjectsApi, peering: str) -> dict[str, dict]:
    """The keep-alive records in the ClusterKopfPeering, by kopf's identity of each replica (the pod name)."""
    body = custom.get_cluster_custom_object(KOPF, "v1", "clusterkopfpeerings", peering, _request_timeout=30)
    return body.get("status") or {}


@pytest.mark.timeout(420)
def test_two_replicas_as_the_chart_runs_them_hand_over_after_a_kill_and_lose_nothing(plane, operators, tmp_path):
    assert plane.state is not None
    custom = k8s.CustomObjectsApi(api_of(plane.state.kubeconfig))
    replicas = ChartReplicas.render()
    plane.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", "-", input=yaml.safe_dump_all(replicas.crds))
    for crd in replicas.crds:
        plane.kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s")
    plane.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", "-", input=yaml.safe_dump(replicas.peering))
    peering = replicas.peering["metadata"]["name"]

    # each pod's priority is its own, from its name (--priority=auto): the higher one acts
    by_priority = sorted(POD_NAMES, key=pod_priority, reverse=True)
    assert pod_priority(by_priority[0]) != pod_priority(by_priority[1])
    kubeconfig = plane.state.kubeconfig
    active, standby = (replicas.pod(name, kubeconfig, tmp_path) for name in by_priority)
    operators.extend([active, standby])
    active.start()
    wait_until("the acting pod's record", lambda: set(peers(custom, peering)) == {active.name}, timeout=60)
    standby.start()
    wait_until("both pods' records in the peering", lambda: len(peers(custom, peering)) == 2, timeout=60)
    records = peers(custom, peering)
    assert {name: record["lifetime"] for name, record in records.items()} == dict.fromkeys(POD_NAMES, replicas.lifetime)
    assert {name: record["priority"] for name, record in records.items()} == {n: pod_priority(n) for n in POD_NAMES}
    # kopf starts a replica with mandatory peering paused, and resumes it only when no live peer has a
    # higher priority: the standby stays paused without a word ("Resuming operations" would be the word)

    names = [f"peer-{index:02d}" for index in range(10)]
    for name in names:
        create(custom, name)
    wait_converged(custom, dict.fromkeys(names), "the RewardModels, reconciled by one pod", timeout=120)
    active_reconciles, standby_reconciles = active.reconciles(), standby.reconciles()
    standby_handlers = standby.log_lines("Handler '")
    log(f"peering: the acting pod reconciled {active_reconciles:.0f} times, the standby {standby_reconciles:.0f}")
    assert active_reconciles >= len(names)
    assert standby_reconciles == 0 and not standby_handlers, standby_handlers[:5]
    assert not standby.log_lines("Resuming operations")

    # the acting pod dies without a word (its node is lost): the standby resumes once the dead pod's
    # record expires; what changed meanwhile converges, and nothing converged before is lost
    active.kill()
    killed_at = time.monotonic()
    patch_max_model_len(plane, names[0], 8192)
    create(custom, "after-failover")
    wait_converged(
        custom,
        {**dict.fromkeys(names[1:]), names[0]: 8192, "after-failover": 16384},
        f"the standby to take over (peering lifetime {replicas.lifetime}s)",
        timeout=replicas.lifetime + 90,
    )
    took_over_in = time.monotonic() - killed_at
    log(
        f"peering: hand-over after kill -9 of the acting pod: the standby converged the changes "
        f"{took_over_in:.1f}s after the kill (the chart's peering.lifetime {replicas.lifetime}s; a Go operator's "
        f"lease {GO_LEASE_SECONDS}s; kopf's default lifetime of 60s took 57s)"
    )
    assert standby.alive()
    assert standby.reconciles() > 0
    assert standby.log_lines("Resuming operations")
    # kopf records the handled configuration just after the handler that wrote the status returns
    problems: list[str] = []

    def settled() -> bool:
        nonlocal problems
        problems = status_problems(custom)
        return not problems

    try:
        wait_until("kopf's bookkeeping on every RewardModel", settled, timeout=30)
    except AssertionError:
        raise AssertionError(f"lost or stale: {problems[:10]}") from None
    ownership, children = ownership_problems(plane, custom)
    assert not ownership, ownership[:10]
    log(
        f"peering: the standby reconciled {standby.reconciles():.0f} times; {children} children, "
        "none lost or duplicated"
    )
