"""The test bed's LocalModel node disks and agents' command lines, without a control plane."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

from testenv.addons import localmodel


@pytest.fixture
def disk(tmp_path):
    return localmodel.node_disks(tmp_path, ["kwok-gpu-0"])["kwok-gpu-0"]


def test_a_node_path_under_mnt_lies_on_that_nodes_disk(disk):
    assert disk.path_of(PurePosixPath("/mnt/models/models/abc")) == disk.root / "models" / "models" / "abc"


@pytest.mark.parametrize("path", ["/var/lib/models", "/mnt/../etc"])
def test_a_node_path_off_the_disk_is_refused(disk, path):
    with pytest.raises(LookupError, match="not on node kwok-gpu-0's disk"):
        disk.path_of(PurePosixPath(path))


def test_the_agents_models_are_read_back_by_their_source_uri(disk):
    folder = disk.path_of(localmodel.AGENT_MODELS) / "9a05ad3843fbee42"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"_name_or_path": "hf://org/m1"}))
    (disk.path_of(localmodel.AGENT_MODELS) / "partial").mkdir()  # a download under way: no config yet
    assert disk.cached_uris() == {"hf://org/m1"}


def test_a_nodes_downloads_go_through_unless_held_or_failing(disk):
    assert disk.control() == localmodel.Control()
    disk.hold_downloads()
    assert disk.control().held
    disk.fail_downloads("no space left on device")
    assert disk.control() == localmodel.Control(failure="no space left on device")
    disk.let_downloads_through()
    assert disk.control() == localmodel.Control()


def test_each_agent_sees_its_own_disk_as_mnt(disk):
    command = localmodel.agent_command(Path("/bin/agent"), "/k/kubeconfig", disk, 4242)
    assert command[0] == "unshare" and "--mount" in command
    script, bound = command[command.index("-c") + 1], command[command.index("-c") + 2]
    assert 'mount --bind "$0" /mnt' in script and bound == str(disk.root)
    assert command[-3:] == ["/bin/agent", "--kubeconfig=/k/kubeconfig", "--health-probe-addr=127.0.0.1:4242"]


def test_an_agent_runs_on_each_gpu_node_of_the_group():
    nodes = [
        {"metadata": {"name": "kwok-gpu-0", "labels": {localmodel.NODE_GROUP_LABEL: localmodel.NODE_GROUP}}},
        {"metadata": {"name": "kwok-cpu-0", "labels": {}}},
    ]
    assert localmodel.gpu_nodes(nodes) == ["kwok-gpu-0"]
