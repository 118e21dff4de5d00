"""gateway.allowedClients enforced: kube-router's firewall on the real node refuses what the policies refuse.

The operator renders two NetworkPolicies for a RewardModel with ``gateway.allowedClients``: the gateway's pods
admit the listed pods on the serving port (and KEDA's namespace and the other gateways on the scaler port, for
scale to zero), and vLLM's pods admit only the gateway. Elsewhere in the test bed nothing enforces them
(test_network_policy.py checks that they are accepted and select the right pods). Here kube-router's firewall,
built from its Go module (``testenv.addons.kube_router``), enforces them on the real node, where containerd runs
the gateway, vLLM's CPU build and the client pods:

1. a pod in KEDA's namespace opens the scaler port of a RewardModel at zero; a pod elsewhere cannot, nor can
   the admitted trainer (it is admitted to the serving port only);
2. the pod that allowedClients names gets its rewards through ``status.url``; a pod in another namespace
   cannot connect to the gateway (by its Service or its pod), and no pod reaches vLLM but the gateway (the
   trainer pod, admitted to the gateway, is refused by vLLM's pod; the gateway's answers came from vLLM);
3. removing allowedClients prunes the policies, and the other namespace's pod gets its rewards again;
4. after the session's ``down``, the host is as before its ``up``: kube-router's chains and ipsets are gone.

The test bed's KEDA is a process on the host, which a node always reaches; so the check of KEDA's port is a
pod where KEDA's operator runs in a cluster: the namespace ``keda`` (the operator's default kedaNamespace).
KEDA's CRDs are installed, so the operator renders scale to zero; KEDA itself does not run here (the wake
suite, `make wake-real`, runs it).

`make network-policy-real` runs it; not in `make test`: kube-router's build (about 6 CPU-minutes cold) and a
cold start of vLLM. Times are printed, never asserted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import yaml

from reward_operator.api.naming import gateway_policy_name, predictor_policy_name
from reward_operator.render.gateway_container import GATEWAY_PORT
from reward_operator.render.networkpolicy import VLLM_PORT
from reward_operator.render.scaler import DEFAULT_KEDA_NAMESPACE, SCALER_PORT
from reward_testing.scoring_cases import PROMPT, RESPONSE
from reward_testing.waiting import wait_until
from testenv import addons, node, served
from testenv.addons import keda
from testenv.helpers import get_json
from testenv.served import connect, finished, reward_model, rewards, serve

TRAINER = {"app.kubernetes.io/name": "trainer"}  # the client pod that allowedClients names
GUARDED = "guarded"
AT_ZERO = "guarded-at-zero"
BODY = {"items": [{"prompt": PROMPT, "response": RESPONSE}]}
ENFORCED_WITHIN_S = 60  # kube-router writes a pod's chains on its informers' events: seconds


@pytest.fixture(scope="session", autouse=True)
def host_as_found() -> Iterator[None]:
    """The host before the session's control plane starts, and again after its ``down`` (this fixture's teardown
    runs after the control plane's): kube-router's chains and ipsets must be gone with the node's changes."""
    before = addons.host_state()
    yield
    after = addons.host_state()
    if after["record"]:
        return  # a node still runs (an E2E_KUBECONFIG cluster, such as `make up`'s, is not taken down here)
    changed = node.host_differences(before, after)
    assert not changed, f"the host after down differs from before up: {changed}"


@pytest.fixture(scope="session", autouse=True)
def keda_crds(host_as_found, cluster) -> None:
    """KEDA's CRDs before the operator starts, which reads the kinds the cluster serves: a RewardModel at zero
    renders a ScaledObject and the scaler port's rule only where KEDA is served."""
    if not cluster.local:
        pytest.skip("needs the test bed's real node and kube-router")
    documents = keda.crds()
    cluster.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", "-",
                    input="\n---\n".join(yaml.safe_dump(doc) for doc in documents))  # fmt: skip
    names = [f"crd/{doc['metadata']['name']}" for doc in documents]
    cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=60s")


@pytest.fixture(scope="module")
def firewall(plane) -> None:
    """kube-router's firewall on the real node: the session's control plane runs it (TESTENV_KUBE_ROUTER=1;
    ``down`` stops it and removes its chains and ipsets)."""
    if not plane.running("kube-router"):
        pytest.fail("the test bed runs no kube-router: TESTENV_KUBE_ROUTER=1 (make network-policy-real sets it)")


@pytest.fixture(scope="module")
def trainer_namespace(cluster, operator, runtimes, firewall) -> Iterator[str]:
    """The RewardModels' namespace, with the trainer's pod (the labels allowedClients names)."""
    with served.client_namespace(cluster, pod_labels=TRAINER) as name:
        yield name


@pytest.fixture(scope="module")
def outsider_namespace(cluster, firewall) -> Iterator[str]:
    """Another namespace on the node, with a client pod that allowedClients does not name."""
    with served.client_namespace(cluster) as name:
        yield name


@pytest.fixture(scope="module")
def keda_namespace(cluster, firewall) -> Iterator[str]:
    """KEDA's namespace (the operator's default), with a client pod where KEDA's operator would be."""
    if get_json(cluster, "namespace", DEFAULT_KEDA_NAMESPACE):
        pytest.skip(f"namespace {DEFAULT_KEDA_NAMESPACE} exists already (KEDA runs in this cluster?)")
    with served.client_namespace(cluster, name=DEFAULT_KEDA_NAMESPACE) as name:
        yield name


def guarded_spec(name: str, uri: str, **serving) -> dict:
    allowed = {"allowedClients": [{"podSelector": {"matchLabels": dict(TRAINER)}}]}
    return reward_model(name, "sequence", uri, gateway=allowed, serving=serving)


def pod_ip(cluster, namespace: str, model: str, component: str) -> str:
    """The address of the model's Ready pod of ``component`` (transformer: the gateway)."""

    def found() -> str | None:
        selector = f"serving.kserve.io/inferenceservice={model},component={component}"
        listed = get_json(cluster, "pods", "-n", namespace, "-l", selector) or {"items": []}
        for pod in listed["items"]:
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
            gone = pod["metadata"].get("deletionTimestamp")
            if pod["status"].get("podIP") and not gone and conditions.get("Ready") == "True":
                return pod["status"]["podIP"]
        return None

    return wait_until(f"{model}'s {component} pod", found, timeout=served.READY_TIMEOUT, interval=2)


def refused(cluster, namespace: str, host: str, port: int, what: str) -> dict:
    """Waits until the client pod in ``namespace`` cannot connect to ``host``:``port`` (kube-router writes a new
    pod's chains within seconds of its events); returns the failed attempt."""
    return _settled(cluster, namespace, host, port, what, connects=False)


def reached(cluster, namespace: str, host: str, port: int, what: str) -> dict:
    """Waits until the client pod in ``namespace`` connects to ``host``:``port``; returns the attempt."""
    return _settled(cluster, namespace, host, port, what, connects=True)


def _settled(cluster, namespace: str, host: str, port: int, what: str, connects: bool) -> dict:
    started = time.monotonic()

    def as_wanted() -> dict | None:
        attempt = connect(cluster, namespace, host, port)
        return attempt if (attempt["error"] is None) == connects else None

    wanted = "connected" if connects else "refused"
    attempt = wait_until(f"{what} {wanted}", as_wanted, timeout=ENFORCED_WITHIN_S, interval=1)
    how = f"in {attempt['ms']} ms" if connects else f"({attempt['error']})"
    print(f"  {what}: {wanted} {how}, {time.monotonic() - started:.1f}s after the first try")
    return attempt


def test_only_kedas_namespace_opens_the_scaler_port_of_a_model_at_zero(
    cluster, trainer_namespace, outsider_namespace, keda_namespace, model_uris
) -> None:
    spec = guarded_spec(AT_ZERO, model_uris["sequence"], minReplicas=0, maxReplicas=1)
    cluster.kubectl("apply", "-n", trainer_namespace, "-f", "-", input=json.dumps(spec))
    try:
        policy = wait_until(
            "the gateway's NetworkPolicy with the scaler port's rule",
            lambda: get_json(cluster, "networkpolicy", gateway_policy_name(AT_ZERO), "-n", trainer_namespace),
            timeout=120,
        )
        ports = [port["port"] for rule in policy["spec"]["ingress"] for port in rule.get("ports", [])]
        assert SCALER_PORT in ports, policy
        gateway = pod_ip(cluster, trainer_namespace, AT_ZERO, "transformer")
        print(f"\n{AT_ZERO}'s gateway at {gateway}, scaler port {SCALER_PORT}:")
        # first what is refused: an answer from KEDA's namespace alone would not show that anything is enforced
        refused(cluster, outsider_namespace, gateway, SCALER_PORT, "a pod in another namespace -> scaler port")
        refused(cluster, trainer_namespace, gateway, SCALER_PORT, "the trainer (serving port only) -> scaler port")
        reached(cluster, keda_namespace, gateway, SCALER_PORT, f"a pod in namespace {keda_namespace} -> scaler port")
    finally:
        finished(cluster, trainer_namespace, AT_ZERO)


@pytest.fixture(scope="module")
def guarded(cluster, trainer_namespace, model_uris) -> Iterator[dict]:
    """A RewardModel that admits only the trainer's pod, served (vLLM's CPU build on the node)."""
    try:
        yield serve(cluster, trainer_namespace, guarded_spec(GUARDED, model_uris["sequence"]))
    finally:
        finished(cluster, trainer_namespace, GUARDED)


def service_host(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def test_only_the_listed_pod_reaches_the_gateway_and_only_the_gateway_reaches_vllm(
    cluster, trainer_namespace, outsider_namespace, guarded
) -> None:
    url = guarded["status"]["url"]
    gateway = pod_ip(cluster, trainer_namespace, GUARDED, "transformer")
    vllm = pod_ip(cluster, trainer_namespace, GUARDED, "predictor")
    print(f"\n{GUARDED}: {url}, gateway pod {gateway}, vLLM pod {vllm}")
    refused(cluster, outsider_namespace, service_host(url), 80, "a pod in another namespace -> the gateway's Service")
    refused(cluster, outsider_namespace, gateway, GATEWAY_PORT, "a pod in another namespace -> the gateway's pod")
    refused(cluster, outsider_namespace, vllm, VLLM_PORT, "a pod in another namespace -> vLLM's pod")
    # admitted to the gateway, not to vLLM: nobody scores around the gateway
    refused(cluster, trainer_namespace, vllm, VLLM_PORT, "the trainer -> vLLM's pod")
    reached(cluster, trainer_namespace, gateway, GATEWAY_PORT, "the trainer -> the gateway's pod")
    # the gateway's answer is vLLM's: the gateway, and only it, reaches vLLM's pod
    answer = rewards(cluster, trainer_namespace, url, "/v1/rewards", BODY)
    assert len(answer["rewards"]) == 1 and answer["identity"]["model"] == GUARDED, answer
    print(f"  the trainer -> status.url: reward {answer['rewards'][0]:.6f}")


def test_removing_allowed_clients_opens_the_gateway_again(cluster, trainer_namespace, outsider_namespace, guarded):
    url = guarded["status"]["url"]
    print()
    admitted = rewards(cluster, trainer_namespace, url, "/v1/rewards", BODY)
    refused(cluster, outsider_namespace, service_host(url), 80, "a pod in another namespace -> the gateway's Service")
    started = time.monotonic()
    patch = {"spec": {"gateway": {"allowedClients": None}}}
    cluster.kubectl("patch", "rewardmodel", GUARDED, "-n", trainer_namespace, "--type=merge", "-p", json.dumps(patch))
    for name in (gateway_policy_name(GUARDED), predictor_policy_name(GUARDED)):
        wait_until(f"NetworkPolicy {name} pruned", lambda n=name: get_json(cluster, "networkpolicy", n, "-n",
                   trainer_namespace) is None, timeout=120)  # fmt: skip
    pruned = time.monotonic() - started
    reached(cluster, outsider_namespace, service_host(url), 80, "a pod in another namespace -> the gateway's Service")
    answer = rewards(cluster, outsider_namespace, url, "/v1/rewards", BODY)
    print(f"allowedClients removed: policies pruned {pruned:.1f}s after the patch, the other namespace's pod "
          f"answered {time.monotonic() - started:.1f}s after it")  # fmt: skip
    assert answer["rewards"] == admitted["rewards"], (answer, admitted)
