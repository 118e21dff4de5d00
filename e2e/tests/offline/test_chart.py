"""The Helm chart, rendered and linted offline with the real helm: its generated files in sync, its values
documented and checked, its peering, images, alerts and Argo CD waves (installed on the API server:
e2e/tests/cluster/test_chart_install.py).

The chart's CRDs live in templates/ (so `helm upgrade` upgrades them) with
`helm.sh/resource-policy: keep` (so `helm uninstall` keeps them).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from reward_testing import versions
from testenv.chart import CHART, EVERYTHING_ON, KUBE_VERSION, run_helm, template


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
        "imageRegistry",
        "image.repository",
        "image.digest",
        "runtimes.cpu.digest",
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
        # a digest is pinned after the tag: another algorithm, or a short one, would pull nothing
        ("image.digest=sha256:abc", "at '/image/digest'"),
        ("runtimes.cpu.digest=sha512:" + "0" * 64, "at '/runtimes/cpu/digest'"),
        ("image.tag=0.1.0@sha256:" + "0" * 64, "at '/image/tag'"),
        # the chart puts the slash between the registry and each repository
        ("imageRegistry=registry.example.com/rlhf/", "at '/imageRegistry'"),
        # the operator reads the names comma-separated, and a Secret's name is a DNS subdomain
        ("imagePullSecrets[0].name=Registry", "at '/imagePullSecrets/0/name'"),
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


def _operator_env(docs: list[dict]) -> dict[str, str]:
    (deployment,) = (doc for doc in docs if doc["kind"] == "Deployment")
    return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_gateway_image_follows_the_operator_image_unless_set(helm):
    def gateway_image(*args: str) -> str:
        return _operator_env(template(helm, "ops", *args))["REWARD_OPERATOR_GATEWAY_IMAGE"]

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


REGISTRY = "registry.example.com/rlhf"
OPERATOR_DIGEST = "sha256:" + "0123456789abcdef" * 4
CPU_DIGEST = "sha256:" + "fedcba9876543210" * 4
# What the release tool writes into the packaged values.yaml before `helm package`
RELEASED = (
    f"--set=imageRegistry={REGISTRY}",
    "--set=image.tag=1.2.3",
    f"--set=image.digest={OPERATOR_DIGEST}",
    "--set=runtimes.cpu.tag=1.2.3",
    f"--set=runtimes.cpu.digest={CPU_DIGEST}",
)
# The GPU runtimes run vLLM's own image, from vLLM's registry
VLLMS_OWN = {
    "ClusterServingRuntime/vllm-reward/kserve-container",
    "ClusterServingRuntime/vllm-generate/kserve-container",
}


def _images(docs: list[dict]) -> dict[str, str]:
    """Every image a render names, by where: each container of every pod spec in it (the operator's, the
    `helm test` pod's, the runtimes'), and the gateway image the operator renders (and runs batches on)."""
    found = {"gateway": _operator_env(docs)["REWARD_OPERATOR_GATEWAY_IMAGE"]}

    def walk(value: object, where: str) -> None:
        if isinstance(value, dict):
            for field in ("containers", "initContainers"):
                if isinstance(containers := value.get(field), list):  # a CRD's schema has a dict there
                    found.update({f"{where}/{c['name']}": c["image"] for c in containers})
            for item in value.values():
                walk(item, where)
        elif isinstance(value, list):
            for item in value:
                walk(item, where)

    for doc in docs:
        walk(doc.get("spec"), f"{doc['kind']}/{doc['metadata']['name']}")
    return found


def test_a_released_chart_pulls_every_image_of_ours_from_its_registry_by_digest(helm):
    shipped = _images(template(helm, "ops"))
    # the bare names, as the test bed imports them into its node
    assert {where: image for where, image in shipped.items() if where not in VLLMS_OWN} == {
        "gateway": "reward-operator:0.1.0",
        "Deployment/reward-operator/operator": "reward-operator:0.1.0",
        "Pod/reward-operator-test-metrics/metrics": "reward-operator:0.1.0",
        "ClusterServingRuntime/vllm-reward-cpu/kserve-container": f"reward-operator-vllm-cpu:{versions.VLLM}",
        "ClusterServingRuntime/vllm-generate-cpu/kserve-container": f"reward-operator-vllm-cpu:{versions.VLLM}",
    }
    released = _images(template(helm, "ops", *RELEASED))
    assert released.keys() == shipped.keys()
    for where, image in released.items():
        if where in VLLMS_OWN:
            assert image == shipped[where], where
            continue
        repository = shipped[where].split(":")[0]
        digest = CPU_DIGEST if repository == "reward-operator-vllm-cpu" else OPERATOR_DIGEST
        # by digest alone: a release whose image did not change renders the same reference (no pod restarted)
        assert image == f"{REGISTRY}/{repository}@{digest}", where


def test_a_full_image_reference_is_used_as_written_whatever_the_registry(helm):
    overridden = _images(
        template(
            helm,
            "ops",
            *RELEASED,
            "--set=gateway.image=gateway.example.com/gateway:2",
            "--set=runtimes.cpuImage=cpu.example.com/vllm-cpu:3",
            "--set=tests.image=tests.example.com/python:4",
        )
    )
    assert overridden["gateway"] == "gateway.example.com/gateway:2"
    assert overridden["ClusterServingRuntime/vllm-reward-cpu/kserve-container"] == "cpu.example.com/vllm-cpu:3"
    assert overridden["Pod/reward-operator-test-metrics/metrics"] == "tests.example.com/python:4"
    assert overridden["Deployment/reward-operator/operator"] == f"{REGISTRY}/reward-operator@{OPERATOR_DIGEST}"


def test_the_operator_is_given_the_pull_secrets_for_the_pods_it_makes(helm):
    """By name, in the format the operator reads (it renders them into each InferenceService and batch Job:
    operator/tests/test_pull_secrets.py); none without any, so a default install renders as before."""
    from reward_operator.settings import Settings

    secrets = ("--set=imagePullSecrets[0].name=registry", "--set=imagePullSecrets[1].name=mirror.example.com")
    env = _operator_env(template(helm, "ops", *secrets))
    assert Settings.from_env(env).image_pull_secrets == ("registry", "mirror.example.com")
    assert "REWARD_OPERATOR_IMAGE_PULL_SECRETS" not in _operator_env(template(helm, "ops"))


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
