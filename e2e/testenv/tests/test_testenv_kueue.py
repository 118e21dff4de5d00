"""Kueue's add-on as the test bed runs it (testenv.addons.kueue), read from the pinned module without a cluster: built
only when asked for and at Kueue's own Kubernetes libraries, its webhooks and conversion webhooks reaching its host
process where its own certificate rotator expects them, and its Configuration."""

from __future__ import annotations

import re

import pytest
import yaml

from testenv import addons, builds
from testenv.addons import kueue

PORT = 40123


@pytest.fixture(autouse=True)
def no_asks_in_the_environment(monkeypatch):
    for kind in addons.KINDS:
        monkeypatch.delenv(kind.env(), raising=False)


def requires(go_mod: str) -> dict[str, str]:
    return dict(re.findall(r"^\s+(\S+) (v\S+)(?: // indirect)?$", go_mod, re.MULTILINE))


def test_kueue_runs_and_is_built_only_when_asked_for(monkeypatch):
    assert "kueue" not in [add_on.name for add_on in addons.choose()]
    assert "kueue" not in {c.module_dir for c in builds.CATALOGUE.select()}
    assert [c.module_dir for c in builds.CATALOGUE.select(["kueue"])] == ["kueue"]
    monkeypatch.setenv("TESTENV_NODE", "0")
    monkeypatch.setenv("TESTENV_KUEUE", "1")
    assert [add_on.name for add_on in addons.choose()] == ["kserve", "kueue"]
    assert kueue.Kueue.build_components == ("kueue",)


def test_kueue_is_built_at_its_own_kubernetes_libraries_not_the_control_planes():
    ours = requires((builds.GO_DIR / "kueue" / "go.mod").read_text())
    upstream = requires((kueue.module_dir() / "go.mod").read_text())
    # those of Kueue's requirements its manager's build takes (kueuectl's cli-runtime, for one, it does not)
    pinned = [m for m in upstream if (m.startswith("k8s.io/") or m == "sigs.k8s.io/controller-runtime") and m in ours]
    assert {"k8s.io/api", "k8s.io/client-go", "k8s.io/apiserver", "sigs.k8s.io/controller-runtime"} <= set(pinned)
    assert {module: ours[module] for module in pinned} == {module: upstream[module] for module in pinned}
    plane_minor = f"v0.{builds.KUBERNETES_VERSION.split('.')[1]}."
    assert not ours["k8s.io/client-go"].startswith(plane_minor)


def test_every_webhook_reaches_kueue_through_its_service_with_no_ca_of_ours():
    documents = kueue.webhook_configurations(PORT)
    assert [doc["metadata"]["name"] for doc in documents] == [kueue.MUTATING, kueue.VALIDATING]
    hooks = {hook["name"]: hook for doc in documents for hook in doc["webhooks"]}
    for hook in hooks.values():
        service = hook["clientConfig"]["service"]
        assert set(hook["clientConfig"]) == {"service"}, "Kueue injects its own CA"
        where = (service["namespace"], service["name"], service["port"])
        assert where == (kueue.NAMESPACE, kueue.WEBHOOK_SERVICE, PORT), hook["name"]
    assert hooks["mjob.kb.io"]["clientConfig"]["service"]["path"] == "/mutate-batch-v1-job"
    # the webhook folder's kustomization keeps the pod webhooks off Kubernetes' and Kueue's own namespaces
    for name in ("mpod.kb.io", "vpod.kb.io"):
        [expression] = hooks[name]["namespaceSelector"]["matchExpressions"]
        assert set(expression["values"]) == {"kube-system", kueue.NAMESPACE}
    [service, secret] = [obj for obj in kueue.cluster_objects() if obj["kind"] in ("Service", "Secret")]
    assert (service["spec"]["type"], service["spec"]["externalName"]) == ("ExternalName", "localhost")
    assert (service["metadata"]["name"], secret["metadata"]["name"]) == (kueue.WEBHOOK_SERVICE, kueue.WEBHOOK_SECRET)


def test_the_conversion_webhooks_are_on_exactly_the_crds_kueues_certificate_rotator_injects():
    # Kueue's rotator fails to become ready while one of the CRDs it injects has no conversion webhook
    rotator = (kueue.module_dir() / "pkg" / "util" / "cert" / "cert.go").read_text()
    injected = set(re.findall(r'Type: cert\.CRDConversion,\s+Name: "([^"]+)"', rotator))
    patches = kueue.conversion_patches(PORT)
    assert set(patches) == injected and len(injected) == 5
    for patch in patches.values():
        webhook = patch["spec"]["conversion"]["webhook"]
        assert webhook["clientConfig"]["service"] == kueue.service_reference(PORT, "/convert")
    stored = {}
    for path in kueue.crd_files():
        crd = yaml.safe_load(path.read_text())
        stored[crd["metadata"]["name"]] = [v["name"] for v in crd["spec"]["versions"] if v["storage"]]
    assert injected <= set(stored) and set(map(tuple, stored.values())) == {("v1beta2",)}


def test_the_configuration_is_kueues_with_batch_jobs_on_a_queue_only_and_everything_on_loopback(tmp_path):
    ports = {name: PORT + offset for offset, name in enumerate(kueue.PORTS)}
    config = kueue.configuration(ports, tmp_path)
    upstream = yaml.safe_load(
        (kueue.module_dir() / "config" / "components" / "manager" / "controller_manager_config.yaml").read_text()
    )
    assert (config["apiVersion"], config["kind"]) == (upstream["apiVersion"], upstream["kind"])
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["manageJobsWithoutQueueName"] is False
    certificates = config["internalCertManagement"]
    assert (certificates["enable"], certificates["webhookServiceName"], certificates["webhookSecretName"]) == (
        True, kueue.WEBHOOK_SERVICE, kueue.WEBHOOK_SECRET,
    )  # fmt: skip
    assert config["webhook"] == {"host": "127.0.0.1", "port": ports["kueue-webhook"], "certDir": str(tmp_path)}
    assert config["health"]["healthProbeBindAddress"].startswith("127.0.0.1:")
    assert config["metrics"]["bindAddress"].startswith("127.0.0.1:")
    command = kueue.command(tmp_path / "kueue", "kubeconfig", tmp_path / "configuration.yaml")
    assert "--feature-gates=VisibilityOnDemand=false" in command
    assert kueue.probe_job()["metadata"]["labels"] == {kueue.QUEUE_LABEL: "testenv-probe"}
