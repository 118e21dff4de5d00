"""`reward-operator render` and `crds`, offline; `run` with kopf itself replaced."""

from __future__ import annotations

import json
from pathlib import Path

import kopf
import pytest
import yaml

from reward_operator import controllers
from reward_operator.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"


def test_render_prints_the_children_of_each_sample(capsys):
    samples = sorted(SAMPLES.glob("rewardmodel-*.yaml"))
    args = ["render", "--namespace", "team-a"]
    for sample in samples:
        args += ["-f", str(sample)]
    assert main(args) == 0
    children = list(yaml.safe_load_all(capsys.readouterr().out))
    assert sum(c["kind"] == "InferenceService" for c in children) == len(samples)
    # the sample with gateway.allowedClients adds its two NetworkPolicies
    assert sum(c["kind"] == "NetworkPolicy" for c in children) == 2
    # and the sample with spec.cache its model cache
    assert sum(c["kind"] == "LocalModelNamespaceCache" for c in children) == 1
    assert {c["kind"] for c in children} == {"InferenceService", "NetworkPolicy", "LocalModelNamespaceCache"}
    assert {c["metadata"]["namespace"] for c in children} == {"team-a"}


def test_render_prints_the_children_of_the_sample_pipeline(capsys):
    samples = sorted(SAMPLES.glob("rlhfpipeline-*.yaml"))
    assert len(samples) == 1
    assert main(["render", "--namespace", "team-a", "-f", str(samples[0])]) == 0
    children = list(yaml.safe_load_all(capsys.readouterr().out))
    # actor, reference and critic, then the graph over them
    assert [c["kind"] for c in children] == ["InferenceService"] * 3 + ["InferenceGraph"]
    assert {c["metadata"]["namespace"] for c in children} == {"team-a"}


def test_every_sample_is_in_the_kustomization():
    listed = yaml.safe_load((SAMPLES / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in SAMPLES.glob("*.yaml") if p.name != "kustomization.yaml")


def test_render_skips_other_kinds_and_says_so(tmp_path, capsys):
    other = tmp_path / "cm.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["render", "-f", str(other)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "", "no children: nothing on stdout"
    assert "skipping ConfigMap" in captured.err


def test_crds_writes_the_committed_files(tmp_path):
    assert main(["crds", "-o", str(tmp_path)]) == 0
    committed = Path(__file__).resolve().parents[2] / "crds"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in committed.glob("*.yaml"))
    for path in tmp_path.iterdir():
        assert path.read_text() == (committed / path.name).read_text()


@pytest.mark.parametrize("log_format", ["full", "json"])
def test_every_log_line_about_an_object_names_it(log_format, monkeypatch, capsys):
    """kopf.configure's default printed "Creation is processed" with no hint of which object."""
    monkeypatch.setattr(kopf, "run", lambda **_: None)
    monkeypatch.setattr(controllers, "build_registry", lambda settings: None)
    assert main(["run", "--standalone", "--log-format", log_format]) == 0
    body = kopf.Body({"metadata": {"namespace": "team-a", "name": "rm-7", "uid": "u"}})
    kopf.LocalObjectLogger(body=body, settings=kopf.OperatorSettings()).info("Creation is processed")
    line = capsys.readouterr().err.strip()
    if log_format == "json":
        assert {"namespace": "team-a", "name": "rm-7"}.items() <= json.loads(line)["object"].items()
    else:
        assert "[team-a/rm-7] Creation is processed" in line


def test_the_operator_caps_glibcs_malloc_arenas_unless_the_user_set_them(monkeypatch):
    import platform

    from reward_operator.cli import cap_malloc_arenas

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert cap_malloc_arenas() is (platform.libc_ver()[0] == "glibc")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert cap_malloc_arenas() is False
