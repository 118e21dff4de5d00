"""The real node of the test bed runs our own image: pods, their network, DNS, the API server.

What every later real-pod test stands on (``testenv.node``): a pod of the operator image built here
from the repository's Dockerfile runs on the real node; the host reaches it by pod IP and by
ClusterIP (kube-proxy); a pod reaches a Service by name (CoreDNS) and the API server through the
``kubernetes`` Service with its ServiceAccount token (the certificate names that address); logs
and exec work through the API server; and a pod outside a real-node namespace stays on kwok's fake
nodes.
"""

from __future__ import annotations

import json
import textwrap
import urllib.request
import uuid

from reward_testing.waiting import wait_until
from testenv import images, node

SERVER = {"name": "web", "port": 8080}


def _server(namespace: str) -> list[dict]:
    """A Deployment serving HTTP with the operator image's Python, and its Service."""
    labels = {"app": SERVER["name"]}
    container = {
        "name": "web",
        "image": images.OPERATOR_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["python", "-m", "http.server", str(SERVER["port"]), "--directory", "/opt"],
        "ports": [{"containerPort": SERVER["port"]}],
        "readinessProbe": {"httpGet": {"path": "/", "port": SERVER["port"]}, "periodSeconds": 1},
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": SERVER["name"], "namespace": namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVER["name"], "namespace": namespace},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": SERVER["port"]}]},
        },
    ]


# Run inside a pod: a Service by name through CoreDNS, and the API server through the kubernetes
# Service with the pod's ServiceAccount token, verified against the cluster's CA.
IN_POD_CHECK = textwrap.dedent(
    """
    import json, ssl, sys, urllib.request
    service = urllib.request.urlopen(sys.argv[1], timeout=10)
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    context = ssl.create_default_context(cafile=account + "/ca.crt")
    request = urllib.request.Request(
        "https://kubernetes.default.svc/version",
        headers={"Authorization": "Bearer " + open(account + "/token").read()},
    )
    api = json.load(urllib.request.urlopen(request, context=context, timeout=10))
    print(json.dumps({"service": service.status, "apiVersion": api["gitVersion"]}))
    """
)


def test_a_pod_of_our_image_is_reached_by_ip_service_and_name_and_reaches_the_api_server(
    node_cluster, node_namespace
) -> None:
    node_cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1", "items": _server(node_namespace)})
    )
    node_cluster.kubectl("rollout", "status", "deployment/web", "-n", node_namespace, "--timeout=120s")
    pods = json.loads(node_cluster.kubectl("get", "pods", "-n", node_namespace, "-l", "app=web", "-o", "json").stdout)
    (pod,) = pods["items"]
    assert pod["spec"]["nodeName"] == node.NAME
    pod_ip = pod["status"]["podIP"]
    assert node.in_pod_subnet(pod_ip), pod_ip

    # from the host: the pod's own address, then the Service's ClusterIP through kube-proxy's rules
    with urllib.request.urlopen(f"http://{pod_ip}:{SERVER['port']}/", timeout=10) as answer:
        assert answer.status == 200
    service = json.loads(node_cluster.kubectl("get", "service", "web", "-n", node_namespace, "-o", "json").stdout)
    cluster_ip = service["spec"]["clusterIP"]

    def service_answers() -> bool:
        # kube-proxy writes the rules a moment after the endpoints appear
        try:
            with urllib.request.urlopen(f"http://{cluster_ip}/", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    wait_until(f"the Service's ClusterIP {cluster_ip} answering from the host", service_answers, timeout=30)

    # from inside the pod (exec through the API server and the kubelet): the Service by name
    # (CoreDNS), which leads back to this very pod (hairpin), and the API server
    url = f"http://web.{node_namespace}.svc.{node.CLUSTER_DOMAIN}/"
    result = node_cluster.kubectl(
        "exec", "-n", node_namespace, pod["metadata"]["name"], "--", "python", "-c", IN_POD_CHECK, url
    )
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["service"] == 200
    version = json.loads(node_cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    assert answer["apiVersion"] == version

    # the container's log through the API server (the server logged the GETs above)
    logs = node_cluster.kubectl("logs", "-n", node_namespace, pod["metadata"]["name"]).stdout
    assert '"GET / HTTP/1.1" 200' in logs


def test_a_pod_outside_a_real_node_namespace_stays_on_the_fake_nodes(node_cluster) -> None:
    # an ordinary namespace of the same cluster (``namespace`` would be the session's, which is another
    # cluster where TESTENV_NODE=0 gives this module a control plane of its own)
    namespace = f"plain-{uuid.uuid4().hex[:8]}"
    node_cluster.kubectl("create", "namespace", namespace)
    node_cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace, "--timeout=60s")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "elsewhere", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "example/never-pulled:1"}]},
    }
    try:
        node_cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
        node_cluster.kubectl("wait", "--for=jsonpath={.spec.nodeName}", "pod/elsewhere", "-n", namespace,
                             "--timeout=60s")  # fmt: skip
        placed = json.loads(node_cluster.kubectl("get", "pod", "elsewhere", "-n", namespace, "-o", "json").stdout)
        assert placed["spec"]["nodeName"] != node.NAME
        assert placed["spec"]["nodeName"].startswith("kwok-")
    finally:
        node_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
