"""The Helm chart, with the real helm against the real API server (rendered and linted offline:
e2e/tests/offline/test_chart.py).

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
import re
import shutil
from collections.abc import Iterator

import pytest
import yaml

from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv.chart import CHART, EVERYTHING_ON, delete_cluster_objects, run_helm, template
from testenv.helpers import get_json, server_dry_run


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


def test_a_wait_that_times_out_says_why_with_the_pods_state_and_events(
    cluster, namespace, helm, release, crds_restored
):
    """A planted replica that cannot schedule: helm's --wait ends in "context deadline exceeded" alone, and the
    failure carries what the pods did (diagnose.pods_report), the scheduler's reason among it."""
    install = ["-n", namespace, "--take-ownership", "--wait", "--timeout=15s", "--set=resources.requests.cpu=1000"]
    with pytest.raises(AssertionError) as failed:
        run_helm(helm, "install", release, str(CHART), *install, env=cluster.env())
    said = "\n".join([str(failed.value), *getattr(failed.value, "__notes__", [])])
    assert "context deadline exceeded" in said
    assert re.search(rf"pod {release}-\S+: Pending on \(no node\)", said), said
    assert "condition PodScheduled=False (Unschedulable: " in said, said
    assert re.search(r"event Warning FailedScheduling.*\[default-scheduler\].*Insufficient cpu", said), said


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
