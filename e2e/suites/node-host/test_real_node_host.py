"""The real node leaves the host as it found it (``make node-host``, in ``make test``).

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
from pathlib import Path

import pytest

from reward_testing.waiting import wait_until
from testenv import addons, images, node
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


def test_a_pod_runs_and_down_leaves_the_host_as_it_found_it(tmp_path: Path) -> None:
    before = _clean_before()
    plane = ControlPlane(tmp_path / "plane")
    plane.up(kserve=False, node=True)
    try:
        pod = _run_a_pod(plane, "host-check")
        assert pod["spec"]["nodeName"] == node.NAME
        assert node.in_pod_subnet(pod["status"]["podIP"]), pod["status"]
        # the comparison can fail: with the node up, the host differs in each kind of state
        during = node.host_differences(before, addons.host_state())
        assert {"iptables", "links", "mounts", "node_processes", "record"} <= during.keys(), during
    finally:
        plane.down()
    assert node.host_differences(before, addons.host_state()) == {}


def test_up_clears_a_node_left_by_an_interrupted_run(tmp_path: Path) -> None:
    before = _clean_before()
    first = ControlPlane(tmp_path / "first")
    state = first.up(kserve=False, node=True)
    _run_a_pod(first, "interrupted")
    # the run is killed outright: every process gone at once, nothing undone (its folder stays)
    for pid in state.pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    wait_until("the first control plane's processes gone", lambda: not any(_alive(p) for p in state.pids.values()))
    assert addons.host_state()["record"], "the interrupted node's record should still be there"

    second = ControlPlane(tmp_path / "second")
    second.up(kserve=False, node=True)
    try:
        pod = _run_a_pod(second, "after")
        assert pod["spec"]["nodeName"] == node.NAME
    finally:
        second.down()
    assert node.host_differences(before, addons.host_state()) == {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"
