"""`reward-operator render`, `validate` and `crds`, offline; `run` with kopf itself replaced."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import kopf
import pytest
import yaml

from reward_operator import __version__, controllers
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
    # each gateway's identity ConfigMap, its generation unknown until the RewardModel is stored
    identities = [c for c in children if c["kind"] == "ConfigMap"]
    assert [c["data"] for c in identities] == [{"generation": ""}] * len(samples)
    assert {c["kind"] for c in children} == {
        "InferenceService",
        "NetworkPolicy",
        "LocalModelNamespaceCache",
        "ConfigMap",
    }
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
    """Every sample but the RewardBatch's: the kustomization serves (Argo CD syncs it), a batch scores a dataset
    the user provides, once."""
    listed = yaml.safe_load((SAMPLES / "kustomization.yaml").read_text())["resources"]
    samples = [p.name for p in SAMPLES.glob("*.yaml") if p.name != "kustomization.yaml"]
    assert sorted(listed) == sorted(name for name in samples if not name.startswith("rewardbatch-"))
    assert any(name.startswith("rewardbatch-") for name in samples)


def test_render_skips_other_kinds_and_says_so(tmp_path, capsys):
    other = tmp_path / "cm.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["render", "-f", str(other)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "", "no children: nothing on stdout"
    assert "skipping ConfigMap" in captured.err


def test_crds_writes_the_committed_files(tmp_path):
    assert main(["crds", "--output-dir", str(tmp_path)]) == 0
    committed = Path(__file__).resolve().parents[2] / "crds"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in committed.glob("*.yaml"))
    for path in tmp_path.iterdir():
        assert path.read_text() == (committed / path.name).read_text()


RM = """apiVersion: serving.rlhf.dev/v1alpha1
kind: RewardModel
metadata: {name: NAME}
spec:
  model: {uri: "hf://org/NAME"EXTRA}
"""


def _reward_model(name: str, extra: str = "") -> str:
    return RM.replace("NAME", name).replace("EXTRA", extra)


PIPELINE_WITH_MODEL_KEY = (
    (SAMPLES / "rlhfpipeline-ppo.yaml").read_text().replace("- name: skywork-rm", "- model: skywork-rm")
)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            _reward_model("rm", ", maxModelLength: 4096"),
            "RewardModel/rm: .spec.model.maxModelLength: field not declared",
        ),
        (
            _reward_model("rm") + "  serving: {minReplica: 2}\n",
            "RewardModel/rm: .spec.serving.minReplica: field not declared",
        ),
        (_reward_model("rm", ", kind: nonsense"), 'RewardModel/rm: .spec.model.kind: Unsupported value: "nonsense"'),
        (PIPELINE_WITH_MODEL_KEY, "RLHFPipeline/ppo: .spec.rewards[0].model: field not declared in schema"),
    ],
)
def test_each_bad_input_is_one_line_naming_document_and_field_with_exit_1(text, line, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["render", "-f", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "", "nothing rendered from an invalid file"
    assert captured.err.splitlines() == [f"{path}:1 {line}" + captured.err.split(line, 1)[1].rstrip()]
    assert line in captured.err and "Traceback" not in captured.err


def test_every_document_is_rendered_and_problems_name_their_document(tmp_path, capsys):
    path = tmp_path / "two.yaml"
    path.write_text(_reward_model("rm-a") + "---\n" + _reward_model("rm-b"))
    assert main(["render", "-f", str(path)]) == 0
    services = [c for c in yaml.safe_load_all(capsys.readouterr().out) if c["kind"] == "InferenceService"]
    assert [s["metadata"]["name"] for s in services] == ["rm-a", "rm-b"]

    path.write_text(_reward_model("rm-a") + "---\n" + _reward_model("rm-b", ", kind: nonsense"))
    assert main(["render", "-f", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"{path}:2 RewardModel/rm-b: .spec.model.kind: ")


def test_render_reads_stdin_and_prints_json(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(_reward_model("rm-a") + "---\n" + _reward_model("rm-b")))
    assert main(["render", "-f", "-", "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "List"
    assert [c["metadata"]["name"] for c in listed["items"] if c["kind"] == "InferenceService"] == ["rm-a", "rm-b"]


def test_validate_lints_without_rendering(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(_reward_model("rm-a")))
    assert main(["validate", "-f", "-"]) == 0
    assert capsys.readouterr().out == "<stdin>:1 RewardModel/rm-a: valid\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(_reward_model("rm-a", ", uri2: x")))
    assert main(["validate", "-f", "-"]) == 1
    assert capsys.readouterr().err == "<stdin>:1 RewardModel/rm-a: .spec.model.uri2: field not declared in schema\n"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("spec: [unclosed", "not YAML"),
        ("- a list\n", None),
        ("apiVersion: serving.rlhf.dev/v1alpha1\nkind: Other\n", ".kind"),
    ],
)
def test_input_that_is_not_a_resource_is_one_line_and_exit_1(text, words, tmp_path, capsys):
    path = tmp_path / "junk.yaml"
    path.write_text(text)
    code = main(["render", "-f", str(path)])
    err = capsys.readouterr().err
    if words is None:  # a document of no API group is skipped, as other kinds are
        assert code == 0 and "skipping" in err
    else:
        assert code == 1 and len(err.splitlines()) == 1 and words in err


def test_server_validation_without_a_cluster_says_so_with_exit_3(tmp_path, capsys):
    path = tmp_path / "rm.yaml"
    path.write_text(_reward_model("rm"))
    assert main(["render", "-f", str(path), "--validate=server", "--kubeconfig", str(tmp_path / "none")]) == 3
    assert "no cluster to validate against" in capsys.readouterr().err


def test_version_and_exit_codes_in_the_help(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"reward-operator {__version__}"
    with pytest.raises(SystemExit):
        main(["render", "--help"])
    assert "exit codes:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["render"])
    assert exited.value.code == 2


def test_crds_print_as_json(capsys):
    assert main(["crds", "-o", "json"]) == 0
    assert [c["spec"]["names"]["kind"] for c in json.loads(capsys.readouterr().out)["items"]] == [
        "RewardModel",
        "RLHFPipeline",
        "RewardBatch",
    ]


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


def _kopf_run_arguments(monkeypatch, *argv: str) -> dict:
    seen: dict = {}
    monkeypatch.setattr(kopf, "run", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(controllers, "build_registry", lambda settings: None)
    assert main(["run", *argv]) == 0
    return seen


def test_peering_lifetime_bounds_the_hand_over_and_defaults_short(monkeypatch):
    """kopf's 60 s record lifetime made a standby wait ~57 s after the acting replica died."""
    from reward_operator.peering import DEFAULT_LIFETIME

    seen = _kopf_run_arguments(monkeypatch, "--peering", "reward-operator", "--priority", "7")
    assert seen["peering_name"] == "reward-operator" and seen["priority"] == 7
    assert seen["settings"].peering.lifetime == DEFAULT_LIFETIME <= 15
    seen = _kopf_run_arguments(monkeypatch, "--peering", "reward-operator", "--peering-lifetime", "20")
    assert seen["settings"].peering.lifetime == 20


@pytest.mark.parametrize("value", ["0", "4", "soon"])
def test_a_peering_lifetime_too_short_to_renew_is_refused(value, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", "--peering", "x", "--peering-lifetime", value])
    assert exited.value.code == 2
    assert "--peering-lifetime: whole seconds, at least 5" in capsys.readouterr().err


def test_priority_auto_gives_each_pod_of_a_deployment_its_own(monkeypatch):
    """kopf pauses every replica of a priority tie: the chart's identical pods take theirs from their names."""
    pods = [f"reward-operator-6b8f7c9d5-{suffix}" for suffix in ("x2k9p", "q7m4z", "b5n8w")]
    priorities = []
    for pod in pods:
        monkeypatch.setenv("POD_ID", pod)
        priorities.append(_kopf_run_arguments(monkeypatch, "--peering", "p", "--priority", "auto")["priority"])
    assert len(set(priorities)) == len(pods)
    assert all(0 <= priority < 2**31 for priority in priorities)
    monkeypatch.setenv("POD_ID", pods[0])  # the same pod name, the same priority (a restart keeps its rank)
    assert _kopf_run_arguments(monkeypatch, "--peering", "p", "--priority", "auto")["priority"] == priorities[0]


def test_priority_auto_outside_a_pod_uses_the_host_name(monkeypatch):
    import socket

    from reward_operator.peering import pod_priority

    monkeypatch.delenv("POD_ID", raising=False)
    seen = _kopf_run_arguments(monkeypatch, "--peering", "p", "--priority", "auto")
    assert seen["priority"] == pod_priority(socket.gethostname())


def test_a_priority_that_is_neither_a_number_nor_auto_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--peering", "x", "--priority", "high"])
    assert "--priority: an integer or 'auto', got 'high'" in capsys.readouterr().err


def test_the_kopf_identity_needs_no_passwd_entry_for_the_uid(monkeypatch):
    # a container whose UID has no passwd entry (our image's 65532, a platform's arbitrary UID): getpass
    # raises, which killed the chart's operator pod at start when kopf asked it
    from reward_operator import peering

    def no_entry() -> str:
        raise KeyError(f"getpwuid(): uid not found: {os.getuid()}")

    monkeypatch.setattr(peering.getpass, "getuser", no_entry)
    identity = peering.own_identity({})
    assert identity.startswith(f"uid{os.getuid()}@") and identity.endswith(f"/{os.getpid()}")
    # the chart's replicas name themselves by their pod (POD_ID), as kopf does
    assert peering.own_identity({"POD_ID": "reward-operator-7d9f-abcde"}) == "reward-operator-7d9f-abcde"


def test_render_validates_a_batch_and_says_why_it_renders_nothing(capsys):
    assert main(["render", "-f", str(SAMPLES / "rewardbatch-best-of-n.yaml")]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() in ("", "[]")
    assert "RewardBatch/round-3-best-of-8: valid; not rendered" in captured.err
