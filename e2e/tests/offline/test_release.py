"""`make release`'s own decisions, offline: the chart it packages (its values pin every image of ours under the
release's registry, comments kept), the versions it accepts, and the test bed registry's password file.

The release pushed, verified, installed and upgraded for real: e2e/suites/release (`make release-real`).
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from release import chart
from release.images import IMAGES, Pushed
from release.registry import Registry
from reward_testing.paths import REPO
from testenv.addons.registry import htpasswd_line
from testenv.chart import helm_binary, template

REGISTRY = "registry.example.com/rlhf"
DIGESTS = {"operator": "sha256:" + "1" * 64, "vllm-cpu": "sha256:" + "2" * 64}


def pushed() -> dict[str, Pushed]:
    return {
        image.name: Pushed(image, f"{REGISTRY}/{image.repository}:1.2.3", DIGESTS[image.name], Path("/dev/null"))
        for image in IMAGES
    }


def test_the_packaged_values_pin_every_image_under_the_registry_and_keep_the_comments():
    values = (chart.CHART / "values.yaml").read_text()
    released = chart.release_values(values, Registry(REGISTRY), "1.2.3", pushed())
    loaded = yaml.safe_load(released)
    assert loaded["imageRegistry"] == REGISTRY
    assert (loaded["image"]["tag"], loaded["image"]["digest"]) == ("1.2.3", DIGESTS["operator"])
    assert (loaded["runtimes"]["cpu"]["tag"], loaded["runtimes"]["cpu"]["digest"]) == ("1.2.3", DIGESTS["vllm-cpu"])
    # only those lines changed: the documentation `helm show values` prints is the chart's own
    changed = [pair for pair in zip(values.splitlines(), released.splitlines(), strict=True) if pair[0] != pair[1]]
    assert len(changed) == 5, changed


def test_a_key_the_chart_lacks_is_an_error_not_a_new_key():
    with pytest.raises(ValueError, match=r"runtimes\.gpu\.digest"):
        chart.set_value((chart.CHART / "values.yaml").read_text(), ("runtimes", "gpu", "digest"), "x")
    # a key of the same name in another block is not taken for it
    with pytest.raises(ValueError, match=r"image\.enabled"):
        chart.set_value((chart.CHART / "values.yaml").read_text(), ("image", "enabled"), "x")


def test_the_released_chart_renders_every_image_of_ours_from_the_registry_by_digest(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(chart.release_values((chart.CHART / "values.yaml").read_text(), Registry(REGISTRY), "1.2.3",
                                           pushed()))  # fmt: skip
    docs = template(helm_binary(), "ops", "-f", str(values))
    images = {
        container["image"]
        for doc in docs
        for spec in (doc.get("spec", {}).get("template", {}).get("spec", {}), doc.get("spec", {}))
        for container in (spec.get("containers") or [])
        if isinstance(container, dict)
    }
    ours = {image for image in images if "reward-operator" in image}
    assert ours, images
    assert all(image.startswith(f"{REGISTRY}/") and "@sha256:" in image for image in ours), ours


@pytest.mark.parametrize("version", ["v1.2.3", "1.2", "1.2.3.4", "01.2.3", "1.2.3+build.5"])
def test_a_version_helm_would_refuse_is_refused_before_anything_is_built(version):
    result = subprocess.run(
        [sys.executable, "-m", "release", "--version", version, "--registry", REGISTRY, "--sign", "none"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 2 and "is not SemVer" in result.stderr, result.stderr


def test_the_registry_password_file_holds_a_bcrypt_hash_of_the_password():
    user, hashed = htpasswd_line("testenv", "s3cret").strip().split(":", 1)
    assert user == "testenv" and hashed.startswith("$2")  # bcrypt: the only scheme distribution accepts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        assert crypt.crypt("s3cret", hashed) == hashed
        assert crypt.crypt("other", hashed) != hashed
