"""KServe v0.20.0's own manager on the local control plane: its webhooks and controller, for real.

Nothing here stands in for KServe: an InferenceService is defaulted and validated
by KServe's webhooks, its pods get KServe's storage-initializer from KServe's pod
webhook, and it turns Ready because KServe's controller says so once kwok runs
the pods. Deleting it leaves nothing behind (the real garbage collector).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest
import yaml

from reward_operator.render import render_reward_model
from reward_testing.paths import REPO, golden_input
from reward_testing.waiting import wait_until
from testenv.helpers import condition, get_json

log = logging.getLogger(__name__)

RUNTIME = "vllm-reward"  # runtimes/vllm-reward.yaml, a ClusterServingRuntime declaring protocolVersions [v1]


def inference_service(name: str, **predictor_model: object) -> dict:
    """A Standard-mode InferenceService for a vLLM model, as a user would write it by hand."""
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": "vLLM"},
                    "storageUri": "hf://example-org/tiny-reward-model",
                    **predictor_model,
                }
            }
        },
    }


def dry_run_create(cluster, namespace: str, manifest: dict):
    return cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-", input=json.dumps(manifest), check=False
    )


def test_defaulting_webhook_sets_protocol_v2_for_vllm(kserve_cluster, kserve_namespace):
    result = dry_run_create(kserve_cluster, kserve_namespace, inference_service("defaulted"))
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)["spec"]["predictor"]["model"]
    assert model["protocolVersion"] == "v2"
    # the mode is ours: the defaulter keeps an explicit one
    annotations = json.loads(result.stdout)["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] == "Standard"


def test_validating_webhook_refuses_concurrency_with_hpa(kserve_cluster, kserve_namespace):
    manifest = inference_service("concurrency")
    manifest["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] = "hpa"
    manifest["spec"]["predictor"].update(scaleMetric="concurrency", scaleTarget=8)
    result = dry_run_create(kserve_cluster, kserve_namespace, manifest)
    assert result.returncode != 0
    assert 'admission webhook "inferenceservice.kserve-webhook-server.validator" denied the request' in result.stderr
    assert "[concurrency] is not a supported metric" in result.stderr


# The autoscaling profiles (README, "Scale to zero between bursts"): KEDA above zero and at zero in Standard
# mode, Knative's own settings in Knative mode.
AUTOSCALING_CASES = (
    "sequence-standard-keda-concurrency",
    "sequence-standard-scale-to-zero",
    "sequence-knative-autoscaling",
)


def _rendered_isvc(case: str, namespace: str) -> dict:
    reward_model = golden_input(case)
    reward_model["metadata"].update(namespace=namespace, uid="00000000-0000-4000-8000-000000000000")
    (isvc,) = [child for child in render_reward_model(reward_model) if child["kind"] == "InferenceService"]
    return isvc


@pytest.mark.parametrize("case", AUTOSCALING_CASES)
def test_kserves_webhooks_admit_each_autoscaling_rendering_as_rendered(kserve_cluster, kserve_namespace, case):
    isvc = _rendered_isvc(case, kserve_namespace)
    result = dry_run_create(kserve_cluster, kserve_namespace, isvc)
    assert result.returncode == 0, result.stderr
    admitted = json.loads(result.stdout)
    # KServe's defaulter keeps every scaling setting of ours (the autoscaler class, Knative's annotations)
    for key, value in isvc["metadata"]["annotations"].items():
        assert admitted["metadata"]["annotations"][key] == value, key
    for field in ("minReplicas", "maxReplicas", "scaleMetric", "scaleTarget"):
        assert admitted["spec"]["predictor"].get(field) == isvc["spec"]["predictor"].get(field), field


def test_kserves_webhook_refuses_our_concurrency_target_on_its_own_hpa(kserve_cluster, kserve_namespace):
    """Why Standard mode's targetConcurrency goes to KEDA (autoscalerClass external) and never reaches
    KServe: the same predictor on KServe's HPA with a concurrency metric is refused."""
    isvc = _rendered_isvc("sequence-standard-keda-concurrency", kserve_namespace)
    isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] = "hpa"
    isvc["spec"]["predictor"].update(scaleMetric="concurrency", scaleTarget=32)
    result = dry_run_create(kserve_cluster, kserve_namespace, isvc)
    assert result.returncode != 0
    assert "[concurrency] is not a supported metric" in result.stderr, result.stderr


def test_kserves_webhook_leaves_knatives_bounds_to_knative(kserve_cluster, kserve_namespace):
    """KServe validates the class and metric of a Knative rendering, never the values of Knative's own
    annotations: a window or delay Knative would refuse passes KServe, so the RewardModel's schema is the
    only guard before Knative's (absent here) refuses the revision."""
    isvc = _rendered_isvc("sequence-knative-autoscaling", kserve_namespace)
    isvc["metadata"]["annotations"].update(
        {"autoscaling.knative.dev/window": "5s", "autoscaling.knative.dev/scale-down-delay": "2h"}
    )
    result = dry_run_create(kserve_cluster, kserve_namespace, isvc)
    assert result.returncode == 0, result.stderr
    # the negative control: the same webhook judges the metric of a Knative rendering
    isvc["spec"]["predictor"]["scaleMetric"] = "cpu"
    result = dry_run_create(kserve_cluster, kserve_namespace, isvc)
    assert result.returncode != 0
    assert "[cpu] is not a supported metric" in result.stderr, result.stderr


# What an InferenceService makes in Standard mode, down to its pods. The module's
# namespace holds nothing else (the webhook tests only dry-run).
CHILD_KINDS = "deployments,replicasets,services,horizontalpodautoscalers,ingresses,pods"


def _objects(cluster, namespace: str) -> dict[str, list[dict]]:
    listed = get_json(cluster, CHILD_KINDS, "-n", namespace) or {}
    found: dict[str, list[dict]] = {}
    for item in listed.get("items", []):
        found.setdefault(item["kind"], []).append(item)
    return found


def _served_args(name: str) -> list[str]:
    return [f"--served-model-name={name}", "--runner=pooling", "--convert=classify"]


@pytest.fixture(scope="module")
def runtime(kserve_cluster) -> dict:
    """The project's ClusterServingRuntime, admitted by KServe's runtime webhook."""
    path = REPO / "runtimes" / f"{RUNTIME}.yaml"
    kserve_cluster.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", str(path))
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def served(kserve_cluster, kserve_namespace, runtime) -> Iterator[str]:
    """A hand-written InferenceService on the project's vLLM runtime, once KServe says it is Ready."""
    name = "reward"
    manifest = inference_service(
        name,
        runtime=RUNTIME,
        # the runtime lists only v1: without this, KServe's defaulter sets v2 and no runtime matches
        protocolVersion="v1",
        args=_served_args(name),
        resources={"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}},
    )
    manifest["spec"]["predictor"].update(minReplicas=1, maxReplicas=2)
    started = time.monotonic()
    kserve_cluster.kubectl(
        "apply", "--server-side", "--field-manager=e2e", "-n", kserve_namespace, "-f", "-", input=json.dumps(manifest)
    )  # fmt: skip

    def ready() -> bool:
        isvc = get_json(kserve_cluster, "inferenceservice", name, "-n", kserve_namespace)
        return (condition(isvc) or {}).get("status") == "True"

    wait_until(f"InferenceService {name} Ready (written by KServe's controller)", ready, timeout=120)
    log.info("InferenceService %s Ready after %.1fs", name, time.monotonic() - started)
    yield name
    kserve_cluster.kubectl(
        "delete", "inferenceservice", name, "-n", kserve_namespace, "--ignore-not-found", "--wait=false"
    )  # fmt: skip


def test_inference_service_becomes_ready_by_kserve(kserve_cluster, kserve_namespace, runtime, served):
    name = served
    isvc = get_json(kserve_cluster, "inferenceservice", name, "-n", kserve_namespace)
    assert isvc is not None
    conditions = {c["type"]: c["status"] for c in isvc["status"]["conditions"]}
    assert conditions["PredictorReady"] == conditions["IngressReady"] == conditions["Ready"] == "True"
    # KServe may write Ready a status update before modelStatus catches up (seen on a loaded machine:
    # InProgress for a moment after Ready): wait for its word rather than read it once
    wait_until(
        "KServe's modelStatus.transitionStatus UpToDate",
        lambda: (get_json(kserve_cluster, "inferenceservice", name, "-n", kserve_namespace)["status"]
                 .get("modelStatus", {}).get("transitionStatus") == "UpToDate"),
        timeout=60,
    )  # fmt: skip
    isvc = get_json(kserve_cluster, "inferenceservice", name, "-n", kserve_namespace)
    assert isvc["status"]["deploymentMode"] == "Standard"
    # in-cluster address (no transformer: the predictor's Service); status.url is the external host
    assert isvc["status"]["address"]["url"] == f"http://{name}-predictor.{kserve_namespace}.svc.cluster.local"
    assert isvc["status"]["url"] == f"http://{name}-{kserve_namespace}.example.com"

    objects = _objects(kserve_cluster, kserve_namespace)
    owned = {
        kind: [o["metadata"]["name"] for o in items if _controller_uid(o) == isvc["metadata"]["uid"]]
        for kind, items in objects.items()
    }
    assert owned["Deployment"] == owned["Service"] == owned["HorizontalPodAutoscaler"] == [f"{name}-predictor"]
    assert owned["Ingress"] == [name]  # class istio: nothing routes it here, KServe counts it Ready anyway

    (pod,) = objects["Pod"]
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] in ("kwok-gpu-0", "kwok-gpu-1")
    # KServe's pod webhook downloads the model before vLLM starts
    (initializer,) = pod["spec"]["initContainers"]
    assert initializer["name"] == "storage-initializer"
    assert initializer["args"] == ["hf://example-org/tiny-reward-model", "/mnt/models"]
    (container,) = pod["spec"]["containers"]
    assert container["name"] == "kserve-container"
    assert {"name": "kserve-provision-location", "mountPath": "/mnt/models", "readOnly": True} in container[
        "volumeMounts"
    ]
    # the runtime's args first, then the InferenceService's
    assert container["args"] == [*runtime["spec"]["containers"][0]["args"], *_served_args(name)]


def _controller_uid(obj: dict) -> str | None:
    for owner in obj["metadata"].get("ownerReferences") or []:
        if owner.get("controller"):
            return owner["uid"]
    return None


def test_kserve_leaves_a_predictor_scaled_on_load_above_zero_to_keda(kserve_cluster, kserve_namespace, runtime):
    """The rendering for a Standard-mode concurrency target (minReplicas 1), run by KServe's controller to
    Ready: the predictor's Deployment carries autoscalerClass external and KServe makes no HPA, for the
    predictor or the gateway, so KEDA's ScaledObject (not applied here) is the only autoscaler."""
    isvc = _rendered_isvc("sequence-standard-keda-concurrency", kserve_namespace)
    name = isvc["metadata"]["name"]
    del isvc["metadata"]["ownerReferences"]  # no RewardModel here: the garbage collector would take it at once
    # small enough for any kwok node beside the module's other model (scaling is what is under test)
    small = {"cpu": "1", "memory": "1Gi"}
    isvc["spec"]["predictor"]["model"]["resources"] = {"requests": small, "limits": small}
    kserve_cluster.kubectl(
        "apply", "--server-side", "--field-manager=reward-operator", "-n", kserve_namespace, "-f", "-",
        input=json.dumps(isvc),
    )  # fmt: skip
    try:

        def ready() -> bool:
            found = get_json(kserve_cluster, "inferenceservice", name, "-n", kserve_namespace)
            return (condition(found) or {}).get("status") == "True"

        # Ready is written after every component's reconcile, autoscalers included
        wait_until(f"InferenceService {name} Ready (written by KServe's controller)", ready, timeout=120)
        found = _objects(kserve_cluster, kserve_namespace)
        mine = {kind: [o for o in items if o["metadata"]["name"].startswith(name)] for kind, items in found.items()}
        assert {o["metadata"]["name"] for o in mine.get("Deployment", [])} == {
            f"{name}-predictor",
            f"{name}-transformer",
        }
        assert not mine.get("HorizontalPodAutoscaler"), "KServe made an HPA beside KEDA's ScaledObject"
        predictor = next(o for o in mine["Deployment"] if o["metadata"]["name"] == f"{name}-predictor")
        assert predictor["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "external"
    finally:
        kserve_cluster.kubectl("delete", "inferenceservice", name, "-n", kserve_namespace, "--wait=false")
        wait_until(
            f"{name} and its workloads gone",
            lambda: (
                not any(
                    o["metadata"]["name"].startswith(name)
                    for items in _objects(kserve_cluster, kserve_namespace).values()
                    for o in items
                )
            ),
            timeout=90,
        )


def test_deleting_leaves_nothing_behind(kserve_cluster, kserve_namespace, served):
    name = served
    assert _objects(kserve_cluster, kserve_namespace)
    kserve_cluster.kubectl("delete", "inferenceservice", name, "-n", kserve_namespace, "--wait=false")
    # KServe's controller removes its finalizer; then the garbage collector takes the children
    wait_until(
        f"InferenceService {name} gone",
        lambda: get_json(kserve_cluster, "inferenceservice", name, "-n", kserve_namespace) is None,
        timeout=30,
    )
    wait_until(
        f"{name}'s Deployment, ReplicaSet, Service, HPA, Ingress and pod garbage-collected",
        lambda: not _objects(kserve_cluster, kserve_namespace),
        timeout=90,
    )


def test_runtime_without_v2_is_refused_when_the_protocol_is_left_to_kserve(kserve_cluster, kserve_namespace, runtime):
    """What an operator must read: no Deployment, Ready stays Unknown, the cause is in modelStatus."""
    kserve_cluster.kubectl(
        "apply", "--server-side", "--field-manager=e2e", "-n", kserve_namespace, "-f", "-",
        input=json.dumps(inference_service("defaulted-v2", runtime=RUNTIME)),
    )  # fmt: skip

    def refused() -> dict | None:
        isvc = get_json(kserve_cluster, "inferenceservice", "defaulted-v2", "-n", kserve_namespace)
        model_status = ((isvc or {}).get("status") or {}).get("modelStatus") or {}
        return isvc if model_status.get("transitionStatus") == "InvalidSpec" else None

    isvc = wait_until("KServe's controller to refuse defaulted-v2", refused, timeout=60)
    assert isvc["spec"]["predictor"]["model"]["protocolVersion"] == "v2"
    assert isvc["status"]["modelStatus"]["lastFailureInfo"] == {
        "reason": "NoSupportingRuntime",
        "message": "Specified runtime does not support specified protocol version",
    }
    assert (condition(isvc) or {}).get("status") == "Unknown"
    deployments = [o["metadata"]["name"] for o in _objects(kserve_cluster, kserve_namespace).get("Deployment", [])]
    assert "defaulted-v2-predictor" not in deployments
    kserve_cluster.kubectl("delete", "inferenceservice", "defaulted-v2", "-n", kserve_namespace, "--wait=false")
