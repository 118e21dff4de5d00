"""Reading the gateways' GET /canary (cluster/gateways.py): from real HTTP servers, and which pods are asked."""

from __future__ import annotations

import http.server
import json
import threading
from types import SimpleNamespace
from typing import ClassVar

import pytest

from reward_operator.cluster import gateways
from reward_testing.ports import free_port


class Answers(http.server.BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, bytes]]] = {}

    def do_GET(self) -> None:
        status, body = self.routes.get(self.path, (404, b'{"detail":"Not Found"}'))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    thread.join()
    Answers.routes = {}


def test_a_replica_in_a_rollout_answers_its_figures(server):
    Answers.routes = {"/canary": (200, json.dumps({"candidate": "c", "percent": 10}).encode())}
    assert gateways.canary_figures(server) == {"candidate": "c", "percent": 10}


@pytest.mark.parametrize(
    "route",
    [None, (200, b"not json"), (200, b"[1, 2]"), (500, b"{}")],
    ids=["no-rollout-404", "not-json", "not-an-object", "error"],
)
def test_a_replica_without_figures_is_left_out(server, route):
    Answers.routes = {"/canary": route} if route else {}
    assert gateways.canary_figures(server) is None


def test_an_unreachable_replica_is_left_out():
    assert gateways.canary_figures(f"127.0.0.1:{free_port()}", timeout=1) is None


def pod(ip: str | None, ready: bool, deleting: bool = False, name: str = "gw", annotations: dict | None = None):
    condition = SimpleNamespace(type="Ready", status="True" if ready else "False")
    return SimpleNamespace(
        status=SimpleNamespace(pod_ip=ip, conditions=[condition]),
        metadata=SimpleNamespace(
            name=name, annotations=annotations, deletion_timestamp="2026-12-01T03:00:00Z" if deleting else None
        ),
    )


def test_only_ready_gateway_pods_with_an_ip_are_asked(monkeypatch):
    selectors = []

    def list_namespaced_pod(namespace, label_selector):
        selectors.append((namespace, label_selector))
        pods = [pod("10.0.0.1", True), pod("10.0.0.2", False), pod(None, True), pod("10.0.0.3", True, deleting=True)]
        return SimpleNamespace(items=pods)

    monkeypatch.setattr(gateways, "core", lambda: SimpleNamespace(list_namespaced_pod=list_namespaced_pod))
    assert gateways.gateway_addresses("ns", "rm") == ["10.0.0.1:8080"]
    assert selectors == [("ns", "serving.kserve.io/inferenceservice=rm,component=transformer")]


def test_a_moved_value_is_set_on_each_gateway_pod_lacking_it_and_a_refused_patch_is_no_failure(monkeypatch):
    """The nudge: the annotations on each pod not going away that lacks them; a pod gone meanwhile (404)
    or a patch the RBAC refuses (403) is skipped, the kubelet's own sync brings the values there."""
    from kubernetes.client.exceptions import ApiException

    patched = []

    def patch_namespaced_pod(name, namespace, body):
        if name in ("gone", "forbidden"):
            raise ApiException(status=404 if name == "gone" else 403, reason="no")
        patched.append((name, namespace, body))

    told = {"serving.rlhf.dev/rollout-share": "0"}
    pods = [pod("10.0.0.1", True, name="a"), pod(None, False, name="starting"), pod("10.0.0.3", True, True, "old")]
    pods += [pod("10.0.0.4", True, name="gone"), pod("10.0.0.5", True, name="forbidden")]
    pods += [pod("10.0.0.6", True, name="told", annotations=told)]
    listed = SimpleNamespace(items=pods)
    api = SimpleNamespace(list_namespaced_pod=lambda namespace, label_selector: listed)
    api.patch_namespaced_pod = patch_namespaced_pod
    monkeypatch.setattr(gateways, "core", lambda: api)
    assert gateways.nudge("ns", "rm", told) == ["a", "starting"]
    assert patched == [
        ("a", "ns", {"metadata": {"annotations": told}}),
        ("starting", "ns", {"metadata": {"annotations": told}}),
    ]
