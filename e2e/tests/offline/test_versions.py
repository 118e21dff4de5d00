"""versions.env is the one home of each pinned version: every copy that must be written elsewhere (a wrapper
module's go.mod, an image tag of vLLM) says the same, and the file reads as make and the shell read it."""

from __future__ import annotations

import re
import subprocess

import pytest

from reward_testing import versions
from reward_testing.paths import REPO
from testenv import builds

# vLLM's image tags, wherever they are written: the runtimes, the chart's copies of them, the install manifest,
# comments and docs
VLLM_TAGS = re.compile(r"(?:reward-operator-vllm-cpu:|vllm/vllm-openai:v)(\d[\w.+-]*\w)")


def test_every_line_is_a_key_and_a_value_make_and_the_shell_read_alike(tmp_path):
    sourced = subprocess.run(
        ["bash", "-c", f'set -a; . "{versions.FILE}"; env -0'], capture_output=True, check=True
    ).stdout.decode()
    from_the_shell = dict(item.split("=", 1) for item in sourced.split("\0") if item)
    assert {key: from_the_shell[key] for key in versions.PINS} == versions.PINS
    bad = tmp_path / "versions.env"
    bad.write_text("# fine\nVLLM_VERSION=1.0\nTORCH_VERSION = 2.0\n")
    with pytest.raises(ValueError, match=r"versions.env:3: not a KEY=value line"):
        versions.read(bad)


@pytest.mark.parametrize("component", builds.COMPONENTS, ids=lambda component: component.module_dir)
def test_each_wrapper_module_requires_the_release_pinned_for_it(component):
    go_mod = (builds.GO_DIR / component.module_dir / "go.mod").read_text()
    for module, release in (component.upstream, *component.also_upstream):
        written = set(re.findall(rf"{re.escape(module)} (v\d\S*)", go_mod))
        assert written == {builds.go_module_version(module, release)}, (
            f"go/{component.module_dir}/go.mod has {module} at {sorted(written)}; versions.env pins {release}"
        )


def test_every_vllm_image_tag_written_is_the_pin():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, text=True)
    found: dict[str, set[str]] = {}
    for name in tracked.stdout.split("\0"):
        path = REPO / name
        if name and path.is_file() and not path.is_symlink():
            for tag in VLLM_TAGS.findall(path.read_text(errors="replace")):
                found.setdefault(tag, set()).add(name)
    assert "runtimes/vllm-reward-cpu.yaml" in found.get(versions.VLLM, set())
    assert set(found) == {versions.VLLM}, {tag: sorted(files) for tag, files in found.items()}
