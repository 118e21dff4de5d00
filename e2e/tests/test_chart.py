"""The Helm chart, with the real helm against the real API server.

The chart's CRDs live in templates/ (so `helm upgrade` upgrades them) with
`helm.sh/resource-policy: keep` (so `helm uninstall` keeps them); the other tests
of a session may have applied the same CRDs and runtimes with kubectl, hence
`--take-ownership` on install, as a user who pre-installed the CRDs would do.

prometheus-operator's CRDs are not part of the test control plane: the test that
renders every optional object installs its own (conftest.monitoring_crds, from its Go
module), whose schemas check the chart's ServiceMonitor, PodMonitor and PrometheusRule.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from reward_testing import versions
from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv.chart import CHART, KUBE_VERSION, delete_cluster_objects, helm_binary, run_helm, template
from testenv.helpers import get_json, server_dry_run

EVERYTHING_ON = [
    "--set=metrics.serviceMonitor.enabled=true",
    "--set=metrics.podMonitor.enabled=true",
    "--set=prometheusRule.enabled=true",
    "--set=dashboard.enabled=true",
]


@pytest.fixture(scope="session")
def helm() -> Path:
    return helm_binary()


# ---- offline ------------------------------------------------------------------


def test_generated_files_are_in_sync(helm):
    # chart copies of crds/, runtimes/, the dashboard and the rules; README; manifests/base
    result = subprocess.run(
        [
            sys.executable,
            str(CHART / "hack" / "sync.py"),
            "--check",
            "--helm",
            str(helm),
            "--kube-version",
            KUBE_VERSION,
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_chart_crds_are_the_operators():
    from reward_operator.api.crd import all_crds, to_yaml

    chart_crds = {path.name: path.read_text() for path in (CHART / "files" / "crds").glob("*.yaml")}
    assert chart_crds == {name: to_yaml(crd) for name, crd in all_crds().items()}


def test_readme_documents_every_value():
    readme = (CHART / "README.md").read_text()
    for key in (
        "image.repository",
        "watch.mode",
        "watch.namespaces",
        "metrics.serviceMonitor.enabled",
        "runtimes.enabled",
        "replicas",
        "peering.lifetime",
    ):
        assert f"| `{key}` |" in readme


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set=watch.mode=namespaces", "--set=watch.namespaces={team-a,team-b}", *EVERYTHING_ON],
        ["--set=replicas=2"],
        ["--set=replicas=3", "--set=watch.mode=namespaces", "--set=watch.namespaces={team-a,team-b}"],
    ],
    ids=["defaults", "namespaced-everything-on", "two-replicas", "three-replicas-namespaced"],
)
def test_helm_lint_is_clean(helm, values):
    result = run_helm(helm, "lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION, *values)
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("watch.mode=namespaced", "at '/watch/mode': value must be one of 'cluster', 'namespaces'"),
        ("watch.mode=namespaces", "at '/watch/namespaces': minItems: got 0, want 1"),
        ("watch.namespaces={Team_A}", "at '/watch/namespaces/0'"),
        ("driftInterval=soon", "at '/driftInterval': got string, want integer"),
        ("image.repository=reward-operator:0.1.0", "at '/image/repository'"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("metrics.port=80", "at '/metrics/port'"),
        ("metrics.serviceMonitor.interval=often", "at '/metrics/serviceMonitor/interval'"),
        # the ServiceMonitor scrapes the operator's own Service: a namespace list would be ignored
        ("metrics.serviceMonitor.namespaces={a}", "additional properties 'namespaces' not allowed"),
        ("replicas=0", "at '/replicas': minimum: got 0, want 1"),
        # kopf would renew every second, and a short stall of the API server would hand over
        ("peering.lifetime=3", "at '/peering/lifetime': minimum: got 3, want 5"),
        ("prometheusRule.alerts.RewardModelNotReady.for=soon", "at '/prometheusRule/alerts/RewardModelNotReady/for'"),
        ("prometheusRule.alerts.RewardModelNotReady.page=true", "additional properties 'page' not allowed"),
    ],
)
def test_schema_rejects_bad_values(helm, value, message):
    result = run_helm(helm, "template", "x", str(CHART), "--kube-version", KUBE_VERSION, "--set", value, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr


def test_deployment_runs_one_instance_through_kopfs_peering(helm):
    (deployment,) = (doc for doc in template(helm, "ops") if doc["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1
    # peering on by default, as a Go operator's leader election: a rolling update's new pod waits for the old one
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}  # fmt: skip
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "reward-operator:0.1.0"
    assert container["args"][:2] == ["run", "--peering=reward-operator"]
    assert "--all-namespaces" in container["args"] and "--standalone" not in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert {"name": "healthz", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]

    namespaced = template(helm, "ops", "--set=watch.mode=namespaces", "--set=watch.namespaces={a,b}")
    (deployment,) = (doc for doc in namespaced if doc["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=a" in args and "--namespace=b" in args and "--all-namespaces" not in args


def _alerts(docs: list[dict]) -> dict[str, dict]:
    (rule,) = (doc for doc in docs if doc["kind"] == "PrometheusRule")
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}


def test_an_alerts_duration_and_severity_are_set_per_install(helm):
    shipped = _alerts(template(helm, "ops", "--set=prometheusRule.enabled=true"))
    tuned = _alerts(template(helm, "ops", "--set=prometheusRule.enabled=true",
                             "--set=prometheusRule.alerts.RewardModelNotReady.for=30s",
                             "--set=prometheusRule.alerts.RewardCanaryAgreementLow.severity=critical"))  # fmt: skip
    assert shipped["RewardModelNotReady"]["for"] == "15m" and tuned["RewardModelNotReady"]["for"] == "30s"
    assert tuned["RewardModelNotReady"]["labels"] == shipped["RewardModelNotReady"]["labels"]
    assert tuned["RewardCanaryAgreementLow"]["labels"]["severity"] == "critical"
    assert tuned["RewardCanaryAgreementLow"]["for"] == shipped["RewardCanaryAgreementLow"]["for"]
    untouched = shipped.keys() - {"RewardModelNotReady", "RewardCanaryAgreementLow"}
    assert untouched and all(tuned[name] == shipped[name] for name in untouched)


def test_an_alert_name_the_rules_do_not_have_is_refused_with_the_names_they_have(helm):
    misspelt = "--set=prometheusRule.alerts.RewardModelNotRedy.for=1m"
    result = run_helm(helm, "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
                      "--set=prometheusRule.enabled=true", misspelt, check=False)  # fmt: skip
    assert result.returncode != 0
    assert "prometheusRule.alerts.RewardModelNotRedy: the chart has no alert of that name" in result.stderr
    assert "RewardModelNotReady" in result.stderr


def _rules_of(docs: list[dict], group: str) -> dict[str, list[dict]]:
    """The rules on ``group`` of each ClusterRole, by the role's name."""
    return {
        doc["metadata"]["name"]: [rule for rule in doc["rules"] if rule["apiGroups"] == [group]]
        for doc in docs
        if doc["kind"] == "ClusterRole"
    }


def _deployment(docs: list[dict]) -> dict:
    (deployment,) = (doc for doc in docs if doc["kind"] == "Deployment")
    return deployment


def test_going_from_one_replica_to_two_changes_no_pod_template(helm):
    """The Deployment controller scales the old pods up first when the replicas and the template change in one
    update: with the template unchanged there is no rollout, and every pod already peers."""
    one, two = template(helm, "ops"), template(helm, "ops", "--set=replicas=2")
    assert _deployment(one)["spec"]["template"] == _deployment(two)["spec"]["template"]
    assert [doc for doc in one if doc["kind"] == "ClusterKopfPeering"]
    # a budget of one pod with one replica would block every drain: only with two
    assert not [doc for doc in one if doc["kind"] == "PodDisruptionBudget"]
    assert [doc for doc in two if doc["kind"] == "PodDisruptionBudget"]


def test_peering_off_runs_one_standalone_instance_and_refuses_more(helm):
    docs = template(helm, "ops", "--set=peering.enabled=false")
    assert not [doc for doc in docs if doc["kind"] in ("ClusterKopfPeering", "KopfPeering", "PodDisruptionBudget")]
    assert not any(_rules_of(docs, "kopf.dev").values())
    deployment = _deployment(docs)
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:3] == ["run", "--standalone", "--all-namespaces"]
    assert "POD_ID" not in {variable["name"] for variable in container["env"]}
    result = run_helm(helm, "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
                      "--set=peering.enabled=false", "--set=replicas=2", check=False)  # fmt: skip
    assert result.returncode != 0
    assert "replicas: 2 needs peering.enabled: true" in result.stderr


def test_two_replicas_peer_through_kopf_with_a_priority_each(helm):
    docs = template(helm, "ops", "--set=replicas=2", release="ha")
    (deployment,) = (doc for doc in docs if doc["kind"] == "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    # a new pod joins before an old one leaves: a rollout never leaves the cluster without a standby
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    container = spec["template"]["spec"]["containers"][0]
    assert "--standalone" not in container["args"]
    (peering,) = (doc for doc in docs if doc["kind"] == "ClusterKopfPeering")
    assert f"--peering={peering['metadata']['name']}" in container["args"]
    # each pod's priority from its own name, which the downward API hands it as kopf's POD_ID
    assert "--priority=auto" in container["args"]
    (pod_id,) = (variable for variable in container["env"] if variable["name"] == "POD_ID")
    assert pod_id["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # the hand-over of a dead pod takes at most its record's lifetime: short by default, a value
    assert "--peering-lifetime=10" in container["args"]
    (deployment,) = (
        doc
        for doc in template(helm, "ops", "--set=replicas=2", "--set=peering.lifetime=20")
        if doc["kind"] == "Deployment"
    )
    assert "--peering-lifetime=20" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    # the standby on another node where the scheduler can
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert (
        anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"].items()
        <= spec["template"]["metadata"]["labels"].items()
    )

    # a drain keeps one pod: the budget selects exactly the operator's pods
    (budget,) = (doc for doc in docs if doc["kind"] == "PodDisruptionBudget")
    assert budget["metadata"]["namespace"] == "ops"
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert spec["selector"]["matchLabels"].items() <= budget["spec"]["selector"]["matchLabels"].items()

    # RBAC: the cluster-wide peering object, watched and patched (the keep-alives), nothing more
    rules = _rules_of(docs, "kopf.dev")
    assert rules["ha-reward-operator-cluster"] == [
        {"apiGroups": ["kopf.dev"], "resources": ["clusterkopfpeerings"], "verbs": ["get", "list", "watch", "patch"]}
    ]
    assert rules["ha-reward-operator"] == []

    # kopf's peering CRDs come from crds/, which Helm installs before the peering object
    crds = [doc for doc in template(helm, "ops", "--include-crds") if doc["kind"] == "CustomResourceDefinition"]
    kopf_crds = {
        doc["spec"]["names"]["kind"]: doc["spec"]["scope"] for doc in crds if doc["spec"]["group"] == "kopf.dev"
    }
    assert kopf_crds == {"ClusterKopfPeering": "Cluster", "KopfPeering": "Namespaced"}
    # Argo CD applies the peering object once its CRD exists, in the same sync
    assert "SkipDryRunOnMissingResource=true" in peering["metadata"]["annotations"]["argocd.argoproj.io/sync-options"]


def test_two_replicas_watching_namespaces_peer_in_each_of_them(helm):
    docs = template(
        helm, "ops", "--set=replicas=2", "--set=watch.mode=namespaces", "--set=watch.namespaces={a,b}", release="ha"
    )
    assert not [doc for doc in docs if doc["kind"] == "ClusterKopfPeering"]
    peerings = {doc["metadata"]["namespace"]: doc["metadata"]["name"] for doc in docs if doc["kind"] == "KopfPeering"}
    assert peerings == {"a": "ha-reward-operator", "b": "ha-reward-operator"}
    # the namespaced role, bound by a RoleBinding in each watched namespace only
    rules = _rules_of(docs, "kopf.dev")
    assert rules["ha-reward-operator"] == [
        {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings"], "verbs": ["get", "list", "watch", "patch"]}
    ]
    assert rules["ha-reward-operator-cluster"] == []
    bound = {doc["metadata"]["namespace"] for doc in docs if doc["kind"] == "RoleBinding"}
    assert bound == {"a", "b"}


def test_gateway_image_follows_the_operator_image_unless_set(helm):
    def gateway_image(*args: str) -> str:
        (deployment,) = (doc for doc in template(helm, "ops", *args) if doc["kind"] == "Deployment")
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        return env["REWARD_OPERATOR_GATEWAY_IMAGE"]

    assert gateway_image("--set=image.repository=registry.example/team/reward-operator") == (
        "registry.example/team/reward-operator:0.1.0"
    )
    assert gateway_image("--set=gateway.image=gateway:2") == "gateway:2"


def test_cpu_runtimes_take_the_cpu_image_from_your_registry(helm):
    def images(*args: str) -> dict[str, str]:
        runtimes = (doc for doc in template(helm, "ops", *args) if doc["kind"] == "ClusterServingRuntime")
        return {doc["metadata"]["name"]: doc["spec"]["containers"][0]["image"] for doc in runtimes}

    shipped = images()
    assert shipped["vllm-reward-cpu"] == shipped["vllm-generate-cpu"] == f"reward-operator-vllm-cpu:{versions.VLLM}"
    moved = images("--set=runtimes.cpuImage=registry.example/team/vllm-cpu:1.2.3")
    assert moved == {
        **shipped,
        "vllm-reward-cpu": "registry.example/team/vllm-cpu:1.2.3",
        "vllm-generate-cpu": "registry.example/team/vllm-cpu:1.2.3",
    }


def test_helm_test_pod_pulls_and_schedules_as_the_operator_pod(helm):
    """The `helm test` pod runs the operator's image: with the operator's pull secrets, on the nodes the
    operator's nodeSelector and tolerations allow (a tainted node pool of its own, the test bed's real node)."""
    placed = [
        "--set=imagePullSecrets[0].name=registry",
        "--set=nodeSelector.pool=operators",
        "--set=tolerations[0].key=dedicated",
        "--set=tolerations[0].operator=Exists",
        "--set=tolerations[0].effect=NoSchedule",
    ]
    docs = template(helm, "ops", *placed)
    (deployment,) = (doc for doc in docs if doc["kind"] == "Deployment")
    (test_pod,) = (doc for doc in docs if doc["kind"] == "Pod")
    operator_pod = deployment["spec"]["template"]["spec"]
    for field in ("imagePullSecrets", "nodeSelector", "tolerations"):
        assert test_pod["spec"][field] == operator_pod[field], field
    assert test_pod["spec"]["nodeSelector"] == {"pool": "operators"}
    (defaults,) = (doc for doc in template(helm, "ops") if doc["kind"] == "Pod")
    assert not {"imagePullSecrets", "nodeSelector", "tolerations"} & defaults["spec"].keys()


def test_crds_come_first_for_argocd_and_are_kept(helm):
    docs = template(helm, "ops")
    for doc in docs:
        annotations = doc["metadata"].get("annotations") or {}
        if doc["kind"] == "CustomResourceDefinition":
            assert annotations["helm.sh/resource-policy"] == "keep"
            assert int(annotations["argocd.argoproj.io/sync-wave"]) < 0
        else:
            assert int(annotations.get("argocd.argoproj.io/sync-wave", "0")) >= 0


# ---- on the API server ----------------------------------------------------------


def test_template_is_accepted_by_the_api_server(cluster, namespace, helm, monitoring_crds):
    # crds/ too (kopf's peering CRDs, for the peering object), as `helm install` applies them
    docs = template(helm, namespace, *EVERYTHING_ON, "--include-crds", release=f"dry-{namespace}")
    server_dry_run(cluster, docs)  # the CRDs for real first, as Argo CD and helm would apply them
    kinds = {doc["kind"] for doc in docs}
    assert kinds >= {
        "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
        "ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap", "NetworkPolicy", "ClusterServingRuntime", "Pod",
    }  # fmt: skip
    (dashboard,) = (doc for doc in docs if doc["kind"] == "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["reward-operator.json"])["uid"] == "reward-operator"


@pytest.fixture
def release(cluster, namespace) -> Iterator[str]:
    name = f"ro-{namespace}"
    yield name
    delete_cluster_objects(cluster, name)


@pytest.fixture
def crds_restored(cluster):
    """The test changes the cluster-wide RewardModel CRD: put the committed one back, pass or fail."""
    try:
        yield
    finally:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=e2e", "-f", str(REPO / "crds"))


def test_install_upgrade_uninstall(cluster, namespace, helm, release, tmp_path, crds_restored):
    env = cluster.env()
    install = ["-n", namespace, "--take-ownership", "--wait", "--timeout=120s", "--set=driftInterval=60"]
    run_helm(helm, "install", release, str(CHART), *install, env=env)

    # the operator pod is scheduled on a kwok node and runs there
    selector = f"app.kubernetes.io/instance={release}"
    pods = get_json(cluster, "pods", "-n", namespace, "-l", selector)["items"]
    assert len(pods) == 1
    node = get_json(cluster, "node", pods[0]["spec"]["nodeName"])
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert pods[0]["status"]["phase"] == "Running"

    # upgrade: a changed CRD in the chart reaches the cluster, and so do changed values
    upgraded = tmp_path / "reward-operator"
    shutil.copytree(CHART, upgraded)
    crd_file = upgraded / "files" / "crds" / "serving.rlhf.dev_rewardmodels.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    crd["spec"]["versions"][0].setdefault("additionalPrinterColumns", []).append(
        {"name": "Upgraded", "type": "string", "jsonPath": ".metadata.name", "priority": 1}
    )
    crd_file.write_text(yaml.safe_dump(crd))
    run_helm(helm, "upgrade", release, str(upgraded), "-n", namespace, "--wait", "--timeout=120s",
             "--set=driftInterval=120", env=env)  # fmt: skip
    live = get_json(cluster, "crd", "rewardmodels.serving.rlhf.dev")
    assert "Upgraded" in [c["name"] for c in live["spec"]["versions"][0].get("additionalPrinterColumns", [])]
    (deployment,) = get_json(cluster, "deployments", "-n", namespace, "-l", selector)["items"]
    env_vars = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env_vars["REWARD_OPERATOR_DRIFT_INTERVAL"] == "120"
    assert "2" in run_helm(helm, "history", release, "-n", namespace, env=env).stdout.split()

    # a RewardModel made while installed; uninstall keeps the CRD and so the model
    sample = (REPO / "manifests" / "samples" / "rewardmodel-sequence-standard.yaml").read_text()
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=sample)
    run_helm(helm, "uninstall", release, "-n", namespace, "--wait", "--timeout=120s", env=env)
    assert get_json(cluster, "deployments", "-n", namespace, "-l", selector)["items"] == []
    assert get_json(cluster, "clusterroles", "-l", selector)["items"] == []
    assert get_json(cluster, "crd", "rewardmodels.serving.rlhf.dev") is not None
    assert get_json(cluster, "rewardmodel", "skywork-rm", "-n", namespace) is not None


# ---- least privilege, checked by the API server ----------------------------------

# what reward-operator's code and kopf need (controllers/, cluster/)
NEEDED = [
    *[(verb, "rewardmodels.serving.rlhf.dev") for verb in ("get", "list", "watch", "patch", "update")],
    *[(verb, "rewardmodels.serving.rlhf.dev/status") for verb in ("get", "patch", "update")],
    ("update", "rewardmodels.serving.rlhf.dev/finalizers"),
    *[(verb, "rlhfpipelines.serving.rlhf.dev") for verb in ("get", "list", "watch", "patch")],
    ("patch", "rlhfpipelines.serving.rlhf.dev/status"),
    *[
        (verb, "inferenceservices.serving.kserve.io")
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete")
    ],
    ("create", "inferencegraphs.serving.kserve.io"),
    ("get", "servingruntimes.serving.kserve.io"),
    ("get", "secrets"),
    ("get", "serviceaccounts"),
    # the predictor's replicas: listed per reconcile, watched so the status follows KEDA, HPA and Knative
    ("list", "deployments.apps"),
    ("watch", "deployments.apps"),
    # a chat template's ConfigMap; a rollout's share ConfigMap, also pruned by label once spec.canary goes;
    # the gateway's identity ConfigMap (the RewardModel's generation), pruned by label once the gateway goes
    *[(verb, "configmaps") for verb in ("get", "create", "patch", "list", "delete")],
    # the InferenceService's pods: a failing container's reason; during a rollout the gateway pods read
    # (GET /canary) and patched with the share annotation when the share moves
    ("list", "pods"),
    ("patch", "pods"),
    # gateway.allowedClients: applied, then pruned by label once no longer rendered
    *[(verb, "networkpolicies.networking.k8s.io") for verb in ("create", "patch", "list", "delete")],
    # scale to zero in Standard mode: KEDA's ScaledObject and the gateway's headless scaler Service,
    # applied, then pruned by label once no longer rendered
    *[(verb, "scaledobjects.keda.sh") for verb in ("create", "patch", "list", "delete")],
    *[(verb, "services") for verb in ("create", "patch", "list", "delete")],
    ("create", "events"),
    ("patch", "events"),
    # spec.cache: the namespaced cache, applied, watched, its users recorded, deleted after the last
    *[
        (verb, "localmodelnamespacecaches.serving.kserve.io")
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    ],
]
NEEDED_CLUSTER_SCOPED = [
    ("get", "clusterservingruntimes.serving.kserve.io"),
    ("list", "clusterservingruntimes.serving.kserve.io"),
    ("create", "localmodelcaches.serving.kserve.io"),
    ("delete", "localmodelcaches.serving.kserve.io"),
    ("watch", "localmodelcaches.serving.kserve.io"),
    ("patch", "localmodelcaches.serving.kserve.io"),
    ("get", "localmodelnodegroups.serving.kserve.io"),
    ("list", "localmodelnodegroups.serving.kserve.io"),
    ("list", "customresourcedefinitions.apiextensions.k8s.io"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("list", "namespaces"),
    ("watch", "namespaces"),
]
NOT_NEEDED = [
    ("create", "rewardmodels.serving.rlhf.dev"),
    ("delete", "rewardmodels.serving.rlhf.dev"),
    ("list", "secrets"),
    ("watch", "secrets"),
    ("create", "secrets"),
    ("create", "pods"),
    ("delete", "pods"),
    ("watch", "configmaps"),
    ("watch", "networkpolicies.networking.k8s.io"),
    ("update", "networkpolicies.networking.k8s.io"),
    ("watch", "services"),
    ("update", "services"),
    ("update", "scaledobjects.keda.sh"),
    ("create", "deployments.apps"),
    ("update", "deployments.apps"),
    ("create", "servingruntimes.serving.kserve.io"),
    ("impersonate", "serviceaccounts"),
    ("create", "serviceaccounts/token"),
    ("create", "rolebindings.rbac.authorization.k8s.io"),
]
NOT_NEEDED_CLUSTER_SCOPED = [
    ("create", "clusterservingruntimes.serving.kserve.io"),
    ("delete", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("delete", "namespaces"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io"),
    ("list", "nodes"),
    ("create", "localmodelnodegroups.serving.kserve.io"),
    ("delete", "localmodelnodegroups.serving.kserve.io"),
]


def can_i(cluster, subject: str, verb: str, resource: str, namespace: str | None) -> bool:
    """`kubectl auth can-i --as=subject`; a SubjectAccessReview for kinds not served yet.

    can-i resolves the resource through discovery, and asks about an empty API group
    when a kind's CRD is not installed (RLHFPipeline until it lands): those are
    asked of the API server directly, with the same attributes.
    """
    scope = ["-n", namespace] if namespace else []
    # `can-i get a/b` would ask about the object named b: subresources go in their own flag
    resource, _, subresource = resource.partition("/")
    if subresource:
        scope.append(f"--subresource={subresource}")
    result = cluster.kubectl("auth", "can-i", verb, resource, f"--as={subject}", *scope, check=False)
    assert result.stdout.strip() in ("yes", "no"), result.stderr
    if "doesn't have a resource type" not in result.stderr:
        return result.stdout.strip() == "yes"
    plural, _, group = resource.partition(".")
    groups = ["system:authenticated"]
    if subject.startswith("system:serviceaccount:"):
        groups += ["system:serviceaccounts", f"system:serviceaccounts:{subject.split(':')[2]}"]
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": subject,
            "groups": groups,
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": plural,
                "subresource": subresource,
                "namespace": namespace or "",
            },
        },
    }
    answer = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review))
    return bool(json.loads(answer.stdout)["status"].get("allowed"))


def apply_rbac(cluster, helm, namespace: str, release: str, *values: str) -> str:
    docs = template(
        helm, namespace, "--set=crds.install=false", "--set=runtimes.enabled=false", *values, release=release
    )
    rbac = [
        doc for doc in docs if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding")
    ]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    (account,) = (doc["metadata"]["name"] for doc in rbac if doc["kind"] == "ServiceAccount")
    return f"system:serviceaccount:{namespace}:{account}"


def check_least_privilege(cluster, subject: str, namespaces: list[str]) -> None:
    problems = []
    for ns in namespaces:
        problems += [f"denied {v} {r} in {ns}" for v, r in NEEDED if not can_i(cluster, subject, v, r, ns)]
        problems += [f"allowed {v} {r} in {ns}" for v, r in NOT_NEEDED if can_i(cluster, subject, v, r, ns)]
    problems += [f"denied {v} {r}" for v, r in NEEDED_CLUSTER_SCOPED if not can_i(cluster, subject, v, r, None)]
    problems += [f"allowed {v} {r}" for v, r in NOT_NEEDED_CLUSTER_SCOPED if can_i(cluster, subject, v, r, None)]
    assert not problems, "\n".join(problems)


def test_rbac_cluster_wide_is_least_privilege(cluster, namespace, helm, release):
    subject = apply_rbac(cluster, helm, namespace, release)
    check_least_privilege(cluster, subject, [namespace, "default"])


def test_rbac_namespaced_reaches_only_watched_namespaces(cluster, namespace, helm, release):
    watched = f"{namespace}-w"
    cluster.kubectl("create", "namespace", watched)
    try:
        subject = apply_rbac(
            cluster, helm, namespace, release, "--set=watch.mode=namespaces", f"--set=watch.namespaces={{{watched}}}"
        )
        check_least_privilege(cluster, subject, [watched])
        for verb, resource in NEEDED:
            assert not can_i(cluster, subject, verb, resource, "default"), f"{verb} {resource} outside watched"
    finally:
        cluster.kubectl("delete", "namespace", watched, "--wait=false", check=False)


def test_users_get_rewardmodels_through_view_and_edit(cluster, namespace, helm, release):
    apply_rbac(cluster, helm, namespace, release)
    for role in ("view", "edit"):
        cluster.kubectl("create", "rolebinding", role, f"--clusterrole={role}", f"--user=alice-{role}", "-n", namespace)
    wait_until(
        "edit to aggregate rewardmodels",
        lambda: can_i(cluster, "alice-edit", "create", "rewardmodels.serving.rlhf.dev", namespace),
    )
    assert can_i(cluster, "alice-edit", "delete", "rlhfpipelines.serving.rlhf.dev", namespace)
    wait_until(
        "view to aggregate rewardmodels", lambda: can_i(cluster, "alice-view", "list", "rewardmodels", namespace)
    )
    assert can_i(cluster, "alice-view", "get", "rewardmodels.serving.rlhf.dev/status", namespace)
    assert not can_i(cluster, "alice-view", "create", "rewardmodels.serving.rlhf.dev", namespace)
    assert not can_i(cluster, "alice-edit", "create", "rewardmodels.serving.rlhf.dev", "default")


# ---- Pod Security ---------------------------------------------------------------


def test_operator_pod_passes_restricted_pod_security(cluster, namespace, helm):
    cluster.kubectl(
        "label", "namespace", namespace,
        "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted",
    )  # fmt: skip
    docs = template(helm, namespace)
    (deployment,) = (doc for doc in docs if doc["kind"] == "Deployment")
    (test_pod,) = (doc for doc in docs if doc["kind"] == "Pod")
    (account,) = (doc for doc in docs if doc["kind"] == "ServiceAccount")
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(account))
    # workloads only get warnings; the pods they would create are enforced
    applied = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(deployment))
    assert "PodSecurity" not in applied.stderr
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator", "namespace": namespace},
        "spec": deployment["spec"]["template"]["spec"],
    }
    cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod))
    cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(test_pod))

    # the namespace really enforces: the same pod without its container securityContext is refused
    del pod["spec"]["containers"][0]["securityContext"]
    refused = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod), check=False)
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr
