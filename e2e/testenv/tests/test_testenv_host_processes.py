"""testenv.host_processes: a program's processes on the host, each with the real node's container that runs
it (or none), read from a /proc laid out as the kernel lays it out; and a real process killed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testenv import host_processes
from testenv.host_processes import HostProcess, container_id, container_of, running

CONTAINER = "3f" * 32
HOST_CGROUP = "12:memory:/user.slice\n1:name=systemd:/user.slice/session-1.scope\n"
CGROUPFS = (
    f"12:memory:/kubepods/burstable/pod0d7e-11/{CONTAINER}\n1:name=systemd:/kubepods/burstable/pod0d7e-11/{CONTAINER}\n"
)
SYSTEMD = (
    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0d7e_11.slice/"
    f"cri-containerd-{CONTAINER}.scope\n"
)


def fake_proc(root: Path, processes: dict[int, tuple[list[str], str]]) -> Path:
    for pid, (argv, cgroup) in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(part.encode() for part in argv) + b"\0")
        (root / str(pid) / "cgroup").write_text(cgroup)
    (root / "self").mkdir()  # not a process of its own
    return root


def test_a_container_is_read_from_either_cgroup_driver_and_a_host_process_has_none():
    assert container_of(CGROUPFS) == CONTAINER
    assert container_of(SYSTEMD) == CONTAINER
    assert container_of(HOST_CGROUP) is None
    # the pod's own cgroup (the sandbox's parent) names no container
    assert container_of("4:cpu:/kubepods/burstable/pod0d7e-11\n") is None


def test_processes_are_matched_by_argument_or_program_name_and_told_apart(tmp_path):
    proc = fake_proc(
        tmp_path,
        {
            40: (["/venv/bin/python", "/venv/bin/reward-operator", "run", "--standalone"], HOST_CGROUP),
            7: (["/opt/reward-operator/bin/python", "/opt/reward-operator/bin/reward-operator", "run"], CGROUPFS),
            9: (["reward-operator", "render", "-f", "x.yaml"], HOST_CGROUP),
            11: (["python", "-m", "reward_gateway"], SYSTEMD),
        },
    )
    assert running("reward-operator", "run", proc=proc) == [
        HostProcess(
            7, ("/opt/reward-operator/bin/python", "/opt/reward-operator/bin/reward-operator", "run"), CONTAINER
        ),
        HostProcess(40, ("/venv/bin/python", "/venv/bin/reward-operator", "run", "--standalone"), None),
    ]
    # a word is a whole argument or program name, never a part of one
    assert running("reward", proc=proc) == []


def test_a_pod_status_container_id_loses_its_runtime():
    assert container_id(f"containerd://{CONTAINER}") == CONTAINER
    assert container_id(CONTAINER) == CONTAINER


def test_a_killed_process_is_gone_when_kill_returns():
    child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        host_processes.kill(child.pid)
        assert child.wait(timeout=5) == -9
    finally:
        child.kill()


def test_a_process_environment_is_read_as_it_started(tmp_path):
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "environ").write_bytes(b"KUBECONFIG=/tmp/plane/kubeconfig\0PATH=/bin:/usr/bin\0EMPTY=\0")
    assert host_processes.environment(12, proc=tmp_path) == {
        "KUBECONFIG": "/tmp/plane/kubeconfig", "PATH": "/bin:/usr/bin", "EMPTY": ""
    }  # fmt: skip
    assert host_processes.environment(13, proc=tmp_path) == {}  # ended, or never was
