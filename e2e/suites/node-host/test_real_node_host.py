"""The real node leaves the host as it found it (``make node-host``, in ``make test``), Knative's pods on it too.

The node changes the host: iptables chains (kubelet, kube-proxy, the bridge plugin), a bridge,
kernel settings, mounts, cgroups and a few fixed paths. CI runs on this machine right after a
session, and the next ``up`` must start clean, so ``down`` undoes all of it, and so does ``up``
when an interrupted run left a node behind. Each test compares ``addons.host_state()`` before ``up``
and after ``down``, with a pod really run in between. Its own target: the session's control plane
of the integration suite holds the machine's one real node.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import urllib.request
from pathlib import Path

import pytest

from reward_testing.waiting import wait_until
from testenv import addons, images, node
from testenv.addons import knative
from testenv.plane.controlplane import ControlPlane

# `make node-host` runs it alone (not beside the session's control plane of `make integration`, which holds
# the machine's one real node)
pytestmark = pytest.mark.skipif(node.RealNode.asked_by_env() is False, reason="TESTENV_NODE=0: no real node")


def _run_a_pod(plane: ControlPlane, name: str) -> dict:
    """A pod in a namespace pinned to the real node, Running with an address of the node's subnet."""
    plane.kubectl("apply", "-f", "-", input=json.dumps(node.namespace_for_real_node(name)))
    plane.kubectl("wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=60s")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pause", "namespace": name},
        "spec": {
            "containers": [{"name": "pause", "image": images.PAUSE_IMAGE, "imagePullPolicy": "Never"}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    plane.kubectl("apply", "-f", "-", input=json.dumps(pod))
    plane.kubectl("wait", "--for=condition=Ready", "pod/pause", "-n", name, "--timeout=120s")
    return json.loads(plane.kubectl("get", "pod", "pause", "-n", name, "-o", "json").stdout)


def _clean_before() -> dict:
    """The host's state before ``up``, once what an interrupted run on this machine left is undone (as ``up``
    does first): a node killed with its session must not pass for this one's changes."""
    node.clear_interrupted_run(addons.leftovers())
    return addons.host_state()


def _assert_the_node_changed_the_host(before: dict) -> None:
    """The comparison can fail: with the node up, the host differs from ``before`` in each kind of state."""
    during = node.host_differences(before, addons.host_state())
    assert {"iptables", "links", "mounts", "node_processes", "record"} <= during.keys(), during


def test_a_pod_runs_and_down_leaves_the_host_as_it_found_it(tmp_path: Path) -> None:
    before = _clean_before()
    plane = ControlPlane(tmp_path / "plane")
    plane.up(kserve=False, node=True, knative=False)
    try:
        pod = _run_a_pod(plane, "host-check")
        assert pod["spec"]["nodeName"] == node.NAME
        assert node.in_pod_subnet(pod["status"]["podIP"]), pod["status"]
        _assert_the_node_changed_the_host(before)
    finally:
        plane.down()
    assert node.host_differences(before, addons.host_state()) == {}


def test_up_clears_a_node_left_by_an_interrupted_run(tmp_path: Path) -> None:
    before = _clean_before()
    first = ControlPlane(tmp_path / "first")
    state = first.up(kserve=False, node=True, knative=False)
    _run_a_pod(first, "interrupted")
    # the run is killed outright: every process gone at once, nothing undone (its folder stays)
    for pid in state.pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    wait_until("the first control plane's processes gone", lambda: not any(_alive(p) for p in state.pids.values()))
    assert addons.host_state()["record"], "the interrupted node's record should still be there"

    second = ControlPlane(tmp_path / "second")
    second.up(kserve=False, node=True, knative=False)
    try:
        pod = _run_a_pod(second, "after")
        assert pod["spec"]["nodeName"] == node.NAME
    finally:
        second.down()
    assert node.host_differences(before, addons.host_state()) == {}


def test_knative_wakes_a_service_through_kourier_and_down_leaves_the_host_as_it_found_it(tmp_path: Path) -> None:
    """Knative and Kourier as the real node runs them (testenv.addons.knative): a Knative Service at zero woken by a
    request from the host through Envoy (kourier-internal's address, the route's host) and the activator,
    then everything gone with ``down``."""
    before = _clean_before()
    plane = ControlPlane(tmp_path / "plane")
    plane.up(kserve=False, node=True, knative=True)
    try:
        namespace = "knative-check"
        plane.kubectl("apply", "-f", "-", input=json.dumps(node.namespace_for_real_node(namespace)))
        plane.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace, "--timeout=60s")
        plane.kubectl("apply", "-f", "-", input=json.dumps(_knative_service(namespace)))
        plane.kubectl("wait", "--for=condition=Ready", "ksvc/hello", "-n", namespace, "--timeout=180s")
        selector = ["-n", namespace, "-l", "serving.knative.dev/service=hello"]
        # idle: Knative takes it to zero pods (its window, then the activator's grace)
        wait_until("the Service at zero pods", lambda: not _pods(plane, selector), timeout=180, interval=2)
        gateway = json.loads(plane.kubectl("get", "service", "kourier-internal", "-n", knative.GATEWAY_NAMESPACE,
                                           "-o", "json").stdout)["spec"]["clusterIP"]  # fmt: skip
        host = f"hello.{namespace}.svc.cluster.local"
        request = urllib.request.Request(f"http://{gateway}/", headers={"Host": host})
        with urllib.request.urlopen(request, timeout=120) as answer:  # held by the activator while a pod starts
            assert answer.status == 200 and b"Directory listing" in answer.read()
        assert _pods(plane, selector), "answered with no pod of the Service"
        _assert_the_node_changed_the_host(before)
    finally:
        plane.down()
    assert node.host_differences(before, addons.host_state()) == {}


def _knative_service(namespace: str) -> dict:
    """Python's file server on Knative's port, at zero after Knative's shortest window."""
    return {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": "hello", "namespace": namespace},
        "spec": {
            "template": {
                "metadata": {"annotations": {"autoscaling.knative.dev/window": "6s"}},
                "spec": {
                    "containers": [
                        {
                            "image": images.OPERATOR_IMAGE,
                            "command": ["python", "-m", "http.server", "8080", "--directory", "/tmp"],
                            "ports": [{"containerPort": 8080}],
                        }
                    ]
                },
            }
        },
    }


def _pods(plane: ControlPlane, selector: list[str]) -> list[dict]:
    listed = json.loads(plane.kubectl("get", "pods", *selector, "-o", "json").stdout)["items"]
    return [pod for pod in listed if not pod["metadata"].get("deletionTimestamp")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"
