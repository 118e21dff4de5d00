"""The local control plane is real: KServe's schemas validate, pods really run."""

from __future__ import annotations

import json
import textwrap

ISVC = textwrap.dedent(
    """\
    apiVersion: serving.kserve.io/v1beta1
    kind: InferenceService
    metadata:
      name: {name}
      annotations:
        serving.kserve.io/deploymentMode: Standard
    spec:
      predictor:
        minReplicas: {min_replicas}
        model:
          modelFormat:
            name: vLLM
          storageUri: hf://example-org/tiny-reward-model
    """
)


def test_a_string_in_min_replicas_is_refused_naming_the_field(cluster, namespace):
    """KServe's defaulting webhook (when it runs) or its CRD schema refuses it, either naming the field."""
    result = cluster.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        input=ISVC.format(name="bad", min_replicas='"two"'),
        check=False,
    )
    assert result.returncode != 0
    assert "minReplicas" in result.stderr
    assert "must be of type integer" in result.stderr or "of type int32" in result.stderr
    assert cluster.kubectl("get", "inferenceservice", "bad", "-n", namespace, check=False).returncode != 0


def test_kserve_schema_accepts_a_valid_inference_service(cluster, namespace):
    cluster.kubectl(
        "apply", "--server-side", "-n", namespace, "-f", "-", input=ISVC.format(name="good", min_replicas=1)
    )
    stored = json.loads(cluster.kubectl("get", "inferenceservice", "good", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["predictor"]["minReplicas"] == 1
    assert stored["spec"]["predictor"]["model"]["modelFormat"]["name"] == "vLLM"


def test_kserve_schema_rejects_unknown_fields_under_strict_validation(cluster, namespace):
    manifest = ISVC.format(name="typo", min_replicas=1).replace("minReplicas", "minReplica")
    result = cluster.kubectl(
        "apply", "--server-side", "--validate=strict", "-n", namespace, "-f", "-", input=manifest, check=False
    )
    assert result.returncode != 0
    assert "minReplica" in result.stderr


DEPLOYMENT = textwrap.dedent(
    """\
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: {name}
    spec:
      replicas: 2
      selector:
        matchLabels: {{app: {name}}}
      template:
        metadata:
          labels: {{app: {name}}}
        spec:
          containers:
          - name: main
            image: example/fake:1
            resources:
              limits: {limits}
    """
)


def _running_pods(cluster, namespace: str, app: str) -> list[dict]:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", f"app={app}", "-o", "json").stdout)
    return pods["items"]


def test_deployment_pods_run_on_kwok_nodes(cluster, namespace):
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=DEPLOYMENT.format(name="web", limits="{cpu: 100m}"))
    cluster.kubectl("wait", "--for=condition=Available", "deployment/web", "-n", namespace, "--timeout=120s")
    pods = _running_pods(cluster, namespace, "web")
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeName"].startswith("kwok-")
        assert all(c["ready"] for c in pod["status"]["containerStatuses"])


def test_gpu_pods_land_on_gpu_nodes(cluster, namespace):
    cluster.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=DEPLOYMENT.format(name="gpu", limits='{"nvidia.com/gpu": 1}'),
    )
    cluster.kubectl("wait", "--for=condition=Available", "deployment/gpu", "-n", namespace, "--timeout=120s")
    nodes = {pod["spec"]["nodeName"] for pod in _running_pods(cluster, namespace, "gpu")}
    assert nodes <= {"kwok-gpu-0", "kwok-gpu-1"}
    gpu_node = json.loads(cluster.kubectl("get", "node", "kwok-gpu-0", "-o", "json").stdout)
    assert gpu_node["metadata"]["labels"]["serving.kserve.io/nodegroup"] == "gpu"
    assert gpu_node["status"]["capacity"]["nvidia.com/gpu"] == "8"
