"""The operator as a pod, installed by its chart, on the test bed's real node.

Every other suite runs the operator as a process of the host with the test bed's admin kubeconfig, and
test_chart.py's install runs the chart's pod on a kwok node, where nothing runs. Here nothing stands in:
`helm install` of charts/reward-operator with the operator image built here from the repository's
Dockerfile (imported into the real node's containerd by the test bed), placed on the real node by the
chart's nodeSelector and tolerations. No operator runs outside a container: the API server sees only the
chart's ServiceAccount, and enforces its RBAC on every call the operator makes.

1. The pod runs on the real node with the chart's ServiceAccount; from inside it, the API server answers
   what the chart grants and refuses what it does not.
2. Pod Security's `restricted` level is enforced on the operator's namespace and on the RewardModel's:
   the operator pod, the gateway and vLLM start there. KServe's storage initializer, as KServe's webhook
   injects it from its ConfigMap, has no securityContext and would be refused; a KServe install gives it
   one through a ClusterStorageContainer (KServe's chart: ``kserve.storage.containerSecurityContext``),
   and so does this module, for the test bed's storage server alone.
3. A tiny CPU RewardModel becomes Ready through the operator pod and scores through its ``status.url``
   as transformers does.
4. `helm test` passes: its pod, on the real node too, reads the operator's metrics through the Service.
5. A verb taken out of the installed ClusterRole (``patch`` on InferenceServices, the server-side apply)
   stops the next RewardModel at ``ApplyFailed`` with the API server's Forbidden, which names the verb;
   put back, the same RewardModel converges, and turns Ready.
6. The operator pod force-deleted, and its container's process killed on the node: the Deployment's
   replacement, and the restarted container, converge a RewardModel changed meanwhile.
7. `replicas: 2` (kopf's peering, as the chart ships it): the acting pod's process frozen on the node, the
   standby takes over once the frozen pod's keep-alive expires, and converges a RewardModel changed meanwhile.

`make operator-pod` runs it; not in `make test`: vLLM's image imported into the node and two cold
starts of vLLM. The figures (seconds to install, to Ready, to converge) are printed, never asserted.
"""

from __future__ import annotations

import json
import re
import textwrap
import time
from datetime import UTC, datetime

import pytest

from reward_operator.api.naming import gateway_policy_name
from reward_operator.peering import pod_priority
from reward_testing.scoring_cases import CONVERSATION, PROMPT, RESPONSE, SPEC_TEMPLATE, assert_close
from reward_testing.waiting import wait_until
from testenv import host_processes, images, node, served
from testenv.chart import CHART, run_helm
from testenv.helpers import ISVC_LABEL, condition, get_json, predictor_pod, wait_for_condition, wait_for_ready
from testenv.operator_pod import OPERATOR, RELEASE, operator_processes, running_operator_pod, running_operator_pods
from testenv.served import finished, reward_model, rewards, serve

# The verb the RBAC test takes away: the operator applies its children server-side, with PATCH.
TAKEN = ("patch", "inferenceservices")
CONVERGED = 180  # seconds: a new operator pod starts, kopf lists and watches, the reconcile runs
# One RewardModel for the RBAC, kill and restart tests (the node's 2 cores serve one vLLM at a time).
SHARED = "rbac"


# Run in the operator's container: the API server asked with the pod's own ServiceAccount token (the
# kubernetes Service's address, as the operator's in-cluster configuration does), who it is and each GET's
# status.
AS_THE_POD = textwrap.dedent(
    """
    import json, os, ssl, sys, urllib.error, urllib.request
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    context = ssl.create_default_context(cafile=account + "/ca.crt")
    server = "https://%s:%s" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
    token = open(account + "/token").read()

    def ask(method, path, body=None):
        data = json.dumps(body).encode() if body else None
        headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
        request = urllib.request.Request(server + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    _, me = ask("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
    answers = {"user": me.get("status", {}).get("userInfo", {}).get("username")}
    for path in sys.argv[1:]:
        status, body = ask("GET", path)
        answers[path] = [status, body.get("message", "")]
    print(json.dumps(answers))
    """
)


def test_the_chart_runs_the_operator_as_a_pod_on_the_real_node_with_its_service_account(cluster, release) -> None:
    pod = running_operator_pod(cluster, release)
    assert pod is not None, get_json(cluster, "pods", "-n", release.namespace)
    spec = pod["spec"]
    assert spec["nodeName"] == node.NAME, spec.get("nodeName")
    (container,) = spec["containers"]
    assert container["image"] == images.OPERATOR_IMAGE
    assert container["args"][:2] == ["run", f"--peering={RELEASE}"]  # the chart's default: kopf's peering
    account = f"system:serviceaccount:{release.namespace}:{spec['serviceAccountName']}"
    assert spec["serviceAccountName"] == RELEASE

    # the only operator on the host is the pod's: its container's process, as the chart's user
    inside, outside = operator_processes(cluster)
    (status,) = pod["status"]["containerStatuses"]
    assert not outside, outside
    assert [p.container for p in inside] == [host_processes.container_id(status["containerID"])], inside
    uid = cluster.kubectl("exec", "-n", release.namespace, pod["metadata"]["name"], "--",
                          "python", "-c", "import os; print(os.getuid())").stdout.strip()  # fmt: skip

    # the API server knows the pod as the chart's ServiceAccount, and answers as its roles say
    granted = "/apis/serving.rlhf.dev/v1alpha1/rewardmodels"
    refused = {
        "/api/v1/secrets": "secrets",  # it reads named Secrets' keys only, never lists them
        "/api/v1/nodes": "nodes",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{release.namespace}/roles": "roles",
    }
    printed = cluster.kubectl("exec", "-n", release.namespace, pod["metadata"]["name"], "--",
                              "python", "-c", AS_THE_POD, granted, *refused).stdout  # fmt: skip
    answers = json.loads(printed.strip().splitlines()[-1])
    assert answers["user"] == account, answers
    assert answers[granted][0] == 200, answers
    for path, resource in refused.items():
        code, message = answers[path]
        assert code == 403 and f'cannot list resource "{resource}"' in message and account in message, answers
    print(
        f"\n[operator pod] helm install --wait {release.install_seconds:.1f}s; pod {pod['metadata']['name']} on "
        f"{spec['nodeName']}, image {container['image']}, uid {uid}, as {answers['user']}; operator processes on "
        f"the host: {len(inside)} in its container, {len(outside)} outside; the API server: 200 for {granted}, "
        f"403 for {', '.join(refused)}"
    )


def test_restricted_pod_security_is_enforced_where_the_operator_and_the_reward_models_run(
    cluster, release, models_namespace
) -> None:
    """Both namespaces enforce `restricted` (a pod without its securityContext is refused there), and the
    operator's and the client's pods run in them."""
    loose = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "loose"},
        "spec": {"containers": [{"name": "c", "image": images.OPERATOR_IMAGE}]},
    }
    for namespace in (release.namespace, models_namespace):
        labels = get_json(cluster, "namespace", namespace)["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted", labels
        refused = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-",
                                  input=json.dumps(loose), check=False)  # fmt: skip
        assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr, refused
    assert running_operator_pod(cluster, release) is not None
    print(f"\n[operator pod] restricted enforced in {release.namespace} and {models_namespace}: the operator pod and "
          "the client pod run, a pod without a securityContext is refused")  # fmt: skip


def test_a_cpu_reward_model_turns_ready_through_the_operator_pod_and_scores_as_transformers(
    cluster, release, models_namespace, model_uris, references, tiny_models, storage_initializer_restricted
) -> None:
    started = time.monotonic()
    try:
        # the references apply the spec's chat template (scoring_cases); vLLM applies it here (upstream mode)
        spec = reward_model("seq", "sequence", model_uris["sequence"], 0, model={"chatTemplate": SPEC_TEMPLATE})
        served_model = serve(cluster, models_namespace, spec)
        ready_after = time.monotonic() - started
        url = served_model["status"]["url"]
        answer = rewards(cluster, models_namespace, url, "/v1/rewards",
                         {"items": [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}]})  # fmt: skip
        want = references["sequence"]
        try:
            assert_close(answer["rewards"], [want["conversation"]["reward"], want["prompt_response"]["reward"]])
        except AssertionError as error:
            pod = predictor_pod(cluster, models_namespace, "seq")["metadata"]["name"]
            differ = served.model_files_differ(cluster, models_namespace, pod, tiny_models["sequence"].path)
            raise AssertionError(f"{error}\nmodel files that differ (here, in {pod}): {differ}\n"
                                 f"{served.what_runs(cluster, models_namespace)}") from None  # fmt: skip

        # the children were applied by the pod's operator (no other runs), and the pods run under `restricted`
        isvc = get_json(cluster, "inferenceservice", "seq", "-n", models_namespace, "--show-managed-fields")
        assert "reward-operator" in {entry["manager"] for entry in isvc["metadata"]["managedFields"]}
        pods = get_json(cluster, "pods", "-n", models_namespace, "-l", f"{ISVC_LABEL}=seq")["items"]
        assert {pod["metadata"]["labels"].get("component") for pod in pods} == {"predictor", "transformer"}, pods
        assert all(pod["spec"]["nodeName"] == node.NAME and pod["status"]["phase"] == "Running" for pod in pods)
        (initializer,) = predictor_pod(cluster, models_namespace, "seq")["spec"]["initContainers"]
        assert storage_initializer_restricted.items() <= initializer["securityContext"].items(), initializer
    finally:
        finished(cluster, models_namespace, "seq")
    print(f"\n[operator pod] RewardModel seq Ready {ready_after:.1f}s after its apply (vLLM's cold start); "
          f"rewards {answer['rewards']} through {url}, as transformers' {want['conversation']['reward']:.6f}, "
          f"{want['prompt_response']['reward']:.6f}; predictor and gateway Running under restricted")  # fmt: skip


def test_helm_test_passes_on_the_real_node(cluster, release) -> None:
    started = time.monotonic()
    result = run_helm(release.helm, "test", RELEASE, "-n", release.namespace, "--timeout=180s", env=release.env)
    assert re.search(r"^Phase:\s+Succeeded$", result.stdout, re.MULTILINE), result.stdout
    # the hook pod is deleted once it succeeds; its events say where it ran: the real node's kubelet started
    # it (a kwok node would have reported it Succeeded with nothing run)
    about = f"involvedObject.name={RELEASE}-test-metrics"
    events = get_json(cluster, "events", "-n", release.namespace, "--field-selector", about)["items"]
    started_by = {
        event.get("source", {}).get("host") or event.get("reportingInstance")
        for event in events
        if event["reason"] == "Started"
    }
    assert started_by == {node.NAME}, events
    print(f"\n[operator pod] helm test {time.monotonic() - started:.1f}s: Succeeded, its pod started by "
          f"{node.NAME}'s kubelet")  # fmt: skip


def cluster_role_rule(cluster, resource: str) -> tuple[int, list[str]]:
    """The installed namespaced ClusterRole's rule on ``resource``: its index and verbs."""
    role = get_json(cluster, "clusterrole", RELEASE)
    (index,) = [i for i, rule in enumerate(role["rules"]) if resource in rule["resources"]]
    return index, role["rules"][index]["verbs"]


def set_verbs(cluster, index: int, verbs: list[str]) -> None:
    patch = [{"op": "replace", "path": f"/rules/{index}/verbs", "value": verbs}]
    cluster.kubectl("patch", "clusterrole", RELEASE, "--type=json", "-p", json.dumps(patch))


def test_a_verb_missing_from_the_cluster_role_stops_a_reward_model_until_it_is_back(
    cluster, release, models_namespace, model_uris
) -> None:
    verb, resource = TAKEN
    index, verbs = cluster_role_rule(cluster, resource)
    assert verb in verbs
    account = f"system:serviceaccount:{release.namespace}:{RELEASE}"
    set_verbs(cluster, index, [v for v in verbs if v != verb])
    try:
        wait_until(f"the API server to refuse {verb} {resource}", lambda: cluster.kubectl(
            "auth", "can-i", verb, f"{resource}.serving.kserve.io", f"--as={account}", "-n", models_namespace,
            check=False).stdout.strip() == "no")  # fmt: skip
        applied = time.monotonic()
        cluster.kubectl("apply", "-n", models_namespace, "-f", "-",
                        input=json.dumps(reward_model(SHARED, "sequence", model_uris["sequence"], 0)))  # fmt: skip
        forbidden = f'cannot {verb} resource "{resource}"'
        failed = wait_for_condition(cluster, models_namespace, SHARED, "Ready", "False", "ApplyFailed",
                                    saying=forbidden, timeout=CONVERGED)  # fmt: skip
        refused_after = time.monotonic() - applied
        assert account in failed["message"], failed
        assert get_json(cluster, "inferenceservice", SHARED, "-n", models_namespace) is None
        log = cluster.kubectl("logs", "-n", release.namespace, "-l", release.selector, "--tail=-1").stdout
        logged = [line for line in log.splitlines() if forbidden in line]
        about = f"involvedObject.kind=RewardModel,involvedObject.name={SHARED}"
        events = get_json(cluster, "events", "-n", models_namespace, "--field-selector", about)["items"]
        warned = [f"{e['type']} {e['reason']}" for e in events if e["reason"] == "ApplyFailed"]
    finally:
        set_verbs(cluster, index, verbs)
    restored = time.monotonic()
    wait_until(
        f"the InferenceService applied once {verb} is back",
        lambda: get_json(cluster, "inferenceservice", SHARED, "-n", models_namespace),
        timeout=CONVERGED,
    )
    converged_after = time.monotonic() - restored
    ready = wait_for_ready(cluster, models_namespace, SHARED, timeout=served.READY_TIMEOUT)
    ready_after = time.monotonic() - restored
    print(
        f"\n[operator pod] without {verb} on {resource}: Ready=False ApplyFailed {refused_after:.1f}s after the "
        f"apply: {failed['message']!r}; events {warned}; operator log lines naming it: {len(logged)}. "
        f"{verb} back: the InferenceService applied {converged_after:.1f}s later, Ready after "
        f"{ready_after:.1f}s (generation {ready['metadata']['generation']})"
    )


def edit_reward_model(cluster, namespace: str, patch: dict) -> int:
    """A spec edit (merge patch) that changes no pod; the generation it makes."""
    edited = cluster.kubectl("patch", "rewardmodel", SHARED, "-n", namespace, "--type=merge",
                             "-p", json.dumps(patch), "-o", "json").stdout  # fmt: skip
    return json.loads(edited)["metadata"]["generation"]


def started_at(container_status: dict) -> datetime:
    return datetime.fromisoformat(container_status["state"]["running"]["startedAt"].replace("Z", "+00:00"))


@pytest.fixture
def shared_model(cluster, models_namespace, model_uris) -> str:
    """The RBAC test's RewardModel, Ready (served again if that test did not leave it so)."""
    serve(cluster, models_namespace, reward_model(SHARED, "sequence", model_uris["sequence"], 0))
    return SHARED


def test_the_operator_pod_force_deleted_its_replacement_converges_a_model_changed_meanwhile(
    cluster, release, models_namespace, shared_model
) -> None:
    old = running_operator_pod(cluster, release)
    assert old is not None
    old_container = host_processes.container_id(old["status"]["containerStatuses"][0]["containerID"])
    killed = time.monotonic()
    cluster.kubectl("delete", "pod", old["metadata"]["name"], "-n", release.namespace, "--grace-period=0", "--force")
    # the kubelet stops the deleted pod's container: then no operator acts until the replacement does
    wait_until("the deleted pod's operator process gone",
               lambda: not [p for p in host_processes.running(*OPERATOR) if p.container == old_container],
               timeout=60, interval=0.1)  # fmt: skip
    old_gone = time.monotonic() - killed
    edited_at = datetime.now(UTC)
    generation = edit_reward_model(cluster, models_namespace,
                                   {"spec": {"gateway": {"allowedClients": [{"namespaceSelector": {}}]}}})  # fmt: skip
    edited = time.monotonic()
    wait_for_ready(cluster, models_namespace, shared_model, generation=generation, timeout=CONVERGED)
    converged = time.monotonic()
    assert get_json(cluster, "networkpolicy", gateway_policy_name(shared_model), "-n", models_namespace)
    new = wait_until("the replacement operator pod running", lambda: running_operator_pod(cluster, release))
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and new["spec"]["nodeName"] == node.NAME
    started_late = (started_at(new["status"]["containerStatuses"][0]) - edited_at).total_seconds()
    print(
        f"\n[operator pod] pod {old['metadata']['name']} force-deleted: its process gone {old_gone:.1f}s later; "
        f"the edit (generation {generation}) made then; the replacement {new['metadata']['name']}'s container "
        f"started {started_late:+.1f}s from the edit; converged {converged - killed:.1f}s after the delete, "
        f"{converged - edited:.1f}s after the edit"
    )


def test_the_operator_process_killed_on_the_node_restarts_and_converges_a_model_changed_meanwhile(
    cluster, release, models_namespace, shared_model
) -> None:
    pod = running_operator_pod(cluster, release)
    assert pod is not None
    (status,) = pod["status"]["containerStatuses"]
    container = host_processes.container_id(status["containerID"])
    (process,) = [p for p in host_processes.running(*OPERATOR) if p.container == container]
    killed = time.monotonic()
    host_processes.kill(process.pid)
    generation = edit_reward_model(cluster, models_namespace, {"spec": {"gateway": {"allowedClients": None}}})
    edited = time.monotonic()
    wait_for_ready(cluster, models_namespace, shared_model, generation=generation, timeout=CONVERGED)
    converged = time.monotonic()
    assert get_json(cluster, "networkpolicy", gateway_policy_name(shared_model), "-n", models_namespace) is None

    def restarted() -> dict | None:
        now = running_operator_pod(cluster, release)
        return (
            now if now and now["status"]["containerStatuses"][0]["restartCount"] == status["restartCount"] + 1 else None
        )

    again = wait_until("the operator's container restarted in the same pod", restarted)
    assert again["metadata"]["uid"] == pod["metadata"]["uid"]
    last = again["status"]["containerStatuses"][0]["lastState"]["terminated"]
    ready = condition(get_json(cluster, "rewardmodel", shared_model, "-n", models_namespace))
    print(
        f"\n[operator pod] pid {process.pid} (container {container[:12]}) killed with SIGKILL: exit code "
        f"{last['exitCode']} ({last.get('reason')}), restart {status['restartCount'] + 1} of the same pod; the "
        f"edit (generation {generation}) converged {converged - killed:.1f}s after the kill, "
        f"{converged - edited:.1f}s after the edit (Ready {ready['status']}, {ready['reason']})"
    )


GO_LEASE_SECONDS = 15  # a Go operator's leader lease: the hand-over's goal (printed, not asserted)


def test_two_replicas_from_the_chart_hand_over_when_the_acting_pod_freezes(
    cluster, release, models_namespace, shared_model
) -> None:
    """replicas: 2 as the chart ships it (kopf's peering, a priority per pod name). The acting pod's process is
    frozen (SIGSTOP on the node: a hung process or a lost node says nothing, unlike a deleted pod, whose kopf
    leaves the peering as it stops): the standby acts once the frozen pod's keep-alive expires."""
    run_helm(release.helm, "upgrade", RELEASE, str(CHART), "-n", release.namespace, "--reuse-values",
             "--set", "replicas=2", "--wait", "--timeout=300s", env=release.env)  # fmt: skip

    def both_running() -> list[dict] | None:
        running = running_operator_pods(cluster, release)
        return running if len(running) == 2 else None

    pods = wait_until("two operator pods running", both_running)
    (peering,) = (get_json(cluster, "clusterkopfpeerings", "-l", f"app.kubernetes.io/instance={RELEASE}") or {})[
        "items"
    ]
    peering_name = peering["metadata"]["name"]

    def records() -> dict:
        return (get_json(cluster, "clusterkopfpeering", peering_name) or {}).get("status") or {}

    names = {pod["metadata"]["name"] for pod in pods}
    wait_until("both pods' keep-alives in the peering", lambda: names <= set(records()), timeout=60)
    acting, standby = sorted(pods, key=lambda pod: pod_priority(pod["metadata"]["name"]), reverse=True)
    lifetime = records()[acting["metadata"]["name"]]["lifetime"]
    container = host_processes.container_id(acting["status"]["containerStatuses"][0]["containerID"])
    (process,) = [p for p in host_processes.running(*OPERATOR) if p.container == container]
    frozen = time.monotonic()
    host_processes.freeze(process.pid)
    try:
        opened = {"spec": {"gateway": {"allowedClients": [{"namespaceSelector": {}}]}}}
        generation = edit_reward_model(cluster, models_namespace, opened)
        wait_for_ready(cluster, models_namespace, shared_model, generation=generation, timeout=CONVERGED)
        handed_over = time.monotonic() - frozen
        assert get_json(cluster, "networkpolicy", gateway_policy_name(shared_model), "-n", models_namespace)
        log = cluster.kubectl("logs", "-n", release.namespace, standby["metadata"]["name"]).stdout
        assert "Resuming operations" in log, log[-2000:]
    finally:  # the frozen pod must not wake as the acting one beside the standby: it goes while frozen
        cluster.kubectl("delete", "pod", acting["metadata"]["name"], "-n", release.namespace,
                        "--grace-period=0", "--force", check=False)  # fmt: skip
    print(
        f"\n[operator pod] replicas 2: {acting['metadata']['name']} acted (priority "
        f"{pod_priority(acting['metadata']['name'])}), {standby['metadata']['name']} stood by; the acting "
        f"process frozen: the standby converged an edit (generation {generation}) {handed_over:.1f}s later "
        f"(the chart's peering.lifetime {lifetime}s; goal: a Go operator's lease, {GO_LEASE_SECONDS}s)"
    )
