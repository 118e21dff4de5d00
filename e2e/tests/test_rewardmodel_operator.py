"""The operator running for real against the cluster: what a user sees after
`kubectl apply -f rewardmodel.yaml`."""

from __future__ import annotations

import json
import urllib.request

import yaml

from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv.helpers import condition, get_json, mark_inference_service_ready

SAMPLE = yaml.safe_load((REPO / "manifests/samples/rewardmodel-sequence-standard.yaml").read_text())


def apply_reward_model(cluster, namespace: str, name: str = "skywork-rm", **spec_changes) -> dict:
    manifest = json.loads(json.dumps(SAMPLE))
    manifest["metadata"]["name"] = name
    for key, value in spec_changes.items():
        manifest["spec"][key] = value
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    return get_json(cluster, "rewardmodel", name, "-n", namespace)


def isvc_of(cluster, namespace: str, name: str) -> dict | None:
    return get_json(cluster, "inferenceservice", name, "-n", namespace)


def merge_patch(cluster, namespace: str, kind: str, patch: dict, name: str = "skywork-rm") -> None:
    cluster.kubectl("patch", kind, name, "-n", namespace, "--type=merge", "-p", json.dumps(patch))


def wait_for_max_replicas(cluster, namespace: str, expected: int, name: str = "skywork-rm") -> None:
    wait_until(
        f"maxReplicas {expected} on the InferenceService",
        lambda: isvc_of(cluster, namespace, name)["spec"]["predictor"]["maxReplicas"] == expected,
        timeout=30,
    )


def events_for(cluster, namespace: str, name: str) -> list[dict]:
    listed = get_json(cluster, "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")
    return listed["items"] if listed else []


def test_create_renders_an_owned_inference_service(cluster, namespace, operator):
    reward_model = apply_reward_model(cluster, namespace)
    isvc = wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    (owner,) = isvc["metadata"]["ownerReferences"]
    assert owner["uid"] == reward_model["metadata"]["uid"]
    assert owner["kind"] == "RewardModel" and owner["controller"] is True
    labels = isvc["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "reward-operator"
    assert labels["serving.rlhf.dev/rewardmodel"] == "skywork-rm"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    with_fields = get_json(cluster, "inferenceservice", "skywork-rm", "-n", namespace, "--show-managed-fields")
    managers = {entry["manager"] for entry in with_fields["metadata"]["managedFields"]}
    assert managers == {"reward-operator"}
    args = isvc["spec"]["predictor"]["model"]["args"]
    assert "--served-model-name=skywork-rm" in args and "--runner=pooling" in args

    reward_model = wait_until(
        "a status", lambda: condition(get_json(cluster, "rewardmodel", "skywork-rm", "-n", namespace))
    )
    stored = get_json(cluster, "rewardmodel", "skywork-rm", "-n", namespace)
    assert stored["status"]["observedGeneration"] == 1
    ready = condition(stored)
    assert (ready["status"], ready["reason"]) == ("Unknown", "AwaitingKServe")


def test_ready_mirrors_the_inference_service_with_url(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    url = f"http://skywork-rm.{namespace}.example.com"
    mark_inference_service_ready(cluster.kubectl, namespace, "skywork-rm", url)

    def ready():
        obj = get_json(cluster, "rewardmodel", "skywork-rm", "-n", namespace)
        return obj if (condition(obj) or {}).get("status") == "True" else None

    obj = wait_until("Ready=True", ready)
    assert obj["status"]["url"] == url
    assert condition(obj)["reason"] == "InferenceServiceReady"
    assert condition(obj)["observedGeneration"] == obj["metadata"]["generation"]
    # the event follows the status write
    wait_until(
        "the Ready event",
        lambda: "InferenceServiceReady" in [e["reason"] for e in events_for(cluster, namespace, "skywork-rm")],
    )
    reasons = [e["reason"] for e in events_for(cluster, namespace, "skywork-rm")]
    assert reasons.count("InferenceServiceReady") == 1
    columns = cluster.kubectl("get", "rewardmodel", "skywork-rm", "-n", namespace).stdout
    assert "True" in columns and url in columns


def test_spec_update_updates_the_child_and_observed_generation(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    merge_patch(cluster, namespace, "rewardmodel", {"spec": {"serving": {"maxReplicas": 6}}})
    wait_for_max_replicas(cluster, namespace, 6)
    obj = wait_until(
        "observedGeneration 2",
        lambda: (
            (o := get_json(cluster, "rewardmodel", "skywork-rm", "-n", namespace))["status"].get("observedGeneration")
            == 2
            and o
        ),
    )
    assert condition(obj)["observedGeneration"] == 2


def test_child_deleted_by_hand_is_restored(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    first = wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    cluster.kubectl("delete", "inferenceservice", "skywork-rm", "-n", namespace)
    wait_until(
        "a restored InferenceService",
        lambda: (i := isvc_of(cluster, namespace, "skywork-rm")) and i["metadata"]["uid"] != first["metadata"]["uid"],
        timeout=30,
    )


def test_owned_field_edited_by_hand_is_reverted(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    merge_patch(cluster, namespace, "inferenceservice", {"spec": {"predictor": {"maxReplicas": 40}}})
    wait_for_max_replicas(cluster, namespace, 4)  # the sample's value, restored


def test_deleting_the_reward_model_garbage_collects_the_child(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    cluster.kubectl("delete", "rewardmodel", "skywork-rm", "-n", namespace, "--timeout=60s")
    wait_until("the InferenceService to be collected", lambda: isvc_of(cluster, namespace, "skywork-rm") is None)


def handled_configuration(cluster, namespace: str, name: str) -> str:
    obj = get_json(cluster, "rewardmodel", name, "-n", namespace) or {}
    return obj.get("metadata", {}).get("annotations", {}).get("serving.rlhf.dev/last-handled-configuration", "")


def _invalid_and_valid_side_by_side(cluster, namespace, bad_name: str, **bad_spec) -> dict:
    apply_reward_model(cluster, namespace, name=bad_name, **bad_spec)
    apply_reward_model(cluster, namespace, name="healthy")

    def invalid():
        obj = get_json(cluster, "rewardmodel", bad_name, "-n", namespace)
        return obj if (condition(obj) or {}).get("reason") == "InvalidSpec" else None

    obj = wait_until("Ready=False reason=InvalidSpec", invalid)
    assert condition(obj)["status"] == "False"
    # the healthy neighbour keeps being served
    wait_until("the healthy RewardModel's InferenceService", lambda: isvc_of(cluster, namespace, "healthy"))
    assert isvc_of(cluster, namespace, bad_name) is None
    return obj


def test_missing_runtime_is_an_invalid_spec_with_one_warning(cluster, namespace, operator):
    obj = _invalid_and_valid_side_by_side(cluster, namespace, "no-runtime", runtime="does-not-exist")
    assert "does-not-exist" in condition(obj)["message"]
    # further reconciles (a metadata edit triggers one) neither crash nor repeat the event
    wait_until("the InvalidSpec event", lambda: events_for(cluster, namespace, "no-runtime"))
    cluster.kubectl("annotate", "rewardmodel", "no-runtime", "-n", namespace, "touched=1")
    # kopf records what it handled once the handler is done: the edit was reconciled
    wait_until(
        "the operator to handle the edit", lambda: "touched" in handled_configuration(cluster, namespace, "no-runtime")
    )
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
    wait_until("the InferenceService once the Secret exists", lambda: isvc_of(cluster, namespace, "no-secret"))
    assert operator.alive()


def test_operator_exports_metrics_and_liveness(cluster, namespace, operator):
    apply_reward_model(cluster, namespace)
    wait_until("a status", lambda: condition(get_json(cluster, "rewardmodel", "skywork-rm", "-n", namespace)))
    with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
        text = response.read().decode()
    for name in (
        "reward_operator_reconcile_total",
        "reward_operator_reconcile_duration_seconds_bucket",
        "reward_operator_objects",
    ):
        assert name in text
    with urllib.request.urlopen(operator.liveness_url, timeout=5) as response:
        assert response.status == 200


PREDICTOR_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: skywork-rm-predictor
spec:
  replicas: 2
  selector:
    matchLabels: {app: skywork-rm-predictor}
  template:
    metadata:
      labels: {app: skywork-rm-predictor}
    spec:
      containers:
      - name: kserve-container
        image: example/vllm:1
"""


def test_replicas_come_from_the_predictor_deployment(cluster, namespace, operator):
    """In Standard mode KServe runs the predictor as Deployment <name>-predictor; its ready pods are the column."""
    apply_reward_model(cluster, namespace)
    wait_until("the InferenceService", lambda: isvc_of(cluster, namespace, "skywork-rm"))
    # stand in for KServe's controller once more: the Deployment it would create, run by kwok
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=PREDICTOR_DEPLOYMENT)
    cluster.kubectl("wait", "--for=condition=Available", "deployment/skywork-rm-predictor", "-n", namespace)
    mark_inference_service_ready(cluster.kubectl, namespace, "skywork-rm", "http://skywork-rm.example")
    obj = wait_until(
        "status.replicas 2",
        lambda: (
            (o := get_json(cluster, "rewardmodel", "skywork-rm", "-n", namespace))["status"].get("replicas") == 2 and o
        ),
    )
    assert "2" in cluster.kubectl("get", "rewardmodel", "skywork-rm", "-n", namespace).stdout.splitlines()[1].split()
    assert condition(obj)["status"] == "True"
