"""The test bed's build cache, without building anything: which components a plain build takes, and
one build of a component at a time (CI builds KEDA in the background while a target may need it)."""

from __future__ import annotations

import sys
import threading

import pytest

from reward_testing.waiting import wait_until
from testenv import builds, images
from testenv.artifacts import one_at_a_time
from testenv.builds import binaries


def test_keda_is_built_only_when_named():
    assert "keda" not in {c.module_dir for c in builds.CATALOGUE.select()}
    assert [c.module_dir for c in builds.CATALOGUE.select(["keda"])] == ["keda"]


@pytest.mark.parametrize("catalogue", [builds.CATALOGUE, images.CATALOGUE], ids=["binaries", "images"])
def test_a_name_not_in_the_catalogue_is_refused_with_the_names_there_are(catalogue):
    with pytest.raises(ValueError, match=r"unknown .*\(s\) nonesuch; known: .*"):
        catalogue.select(["nonesuch"])


def print_to_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def test_a_second_build_of_a_component_waits_for_the_first(tmp_path, capsys):
    lock = tmp_path / "keda-home.lock"  # as build() locks a component's folder
    first_holds, release, second_entered = threading.Event(), threading.Event(), threading.Event()

    def first():
        with one_at_a_time(lock, "keda", print_to_stderr):
            first_holds.set()
            release.wait(30)

    def second():
        with one_at_a_time(lock, "keda", print_to_stderr):
            second_entered.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_holds.wait(10)
    threads[1].start()
    logged = []
    wait_until(
        "the second build to say it waits",
        lambda: logged.append(capsys.readouterr().err) or "waiting" in "".join(logged),
    )
    assert not second_entered.is_set(), "the second build went ahead while the first held the lock"
    release.set()
    assert second_entered.wait(10)
    for thread in threads:
        thread.join(10)
    assert "the other build ended" in "".join(logged) + capsys.readouterr().err


def test_an_entry_point_of_ours_in_a_wrapper_module_is_part_of_its_cache_key(tmp_path, monkeypatch):
    module = tmp_path / "kserve"
    (module / "agent").mkdir(parents=True)
    (module / "go.mod").write_text("module example\n")
    (module / "go.sum").write_text("")
    monkeypatch.setattr(binaries, "GO_DIR", tmp_path)
    component = builds.Component("kserve", {"agent": "example/agent"}, ("example", "1.0.0"))
    (module / "agent" / "main.go").write_text("package main\n")
    before = builds.component_key(component)
    (module / "agent" / "main.go").write_text("package main\n\nfunc main() {}\n")
    assert builds.component_key(component) != before  # an edited entry point builds afresh


def test_the_prometheus_server_is_built_from_promtools_release():
    # one Prometheus release checks the rules (promtool, in make test) and runs them (make prometheus-real)
    assert builds.BY_NAME["prometheus"].upstream == builds.BY_NAME["promtool"].upstream
    module = "github.com/prometheus/prometheus"
    assert builds.go_module_version(module, "3.16.0") == "v0.316.0"
    assert builds.go_module_version(module, "2.54.1") == "v0.54.1"  # Prometheus 2's modules: v0.<minor>
    assert builds.go_module_version("github.com/kserve/kserve", "1.2.3") == "v1.2.3"
    # neither is in a plain build (CI's): only the target that runs them builds them
    assert {"prometheus", "prometheus-operator"}.isdisjoint(c.module_dir for c in builds.CATALOGUE.select())


@pytest.mark.parametrize("name", ["crane", "cosign", "syft"])
def test_the_release_tools_are_built_only_by_a_release_and_say_their_pinned_release(name):
    # make release names them; a plain build (CI's, make unit's) leaves them out
    assert name not in {c.module_dir for c in builds.CATALOGUE.select()}
    component = builds.BY_NAME[name]
    assert [c.module_dir for c in builds.CATALOGUE.select([name])] == [name]
    assert component.binaries == {name: f"{component.upstream[0]}/cmd/{name}"}
    # their --version as their own release binaries print it (a build of ours says "(devel)" or "unknown" else)
    assert component.upstream[1] in component.ldflags


def test_actionlint_which_make_lint_runs_is_in_the_plain_build_at_its_pin():
    # make test's toolchain step builds it beside the rest, so that make lint finds it cached
    assert "actionlint" in {c.module_dir for c in builds.CATALOGUE.select()}
    assert builds.BY_NAME["actionlint"].ldflags.endswith(f".version={builds.BY_NAME['actionlint'].upstream[1]}")
