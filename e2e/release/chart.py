"""The chart of a release: packaged with the release's version and with its registry and digests as the defaults
(so a user sets nothing about images), pushed to ``oci://<registry>/charts``, where helm appends the chart's name
and tags it with its version."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from .images import Pushed
from .registry import Registry
from .tools import run

CHART = Path(__file__).resolve().parents[2] / "charts" / "reward-operator"
NAME = "reward-operator"


def set_value(text: str, path: tuple[str, ...], value: str) -> str:
    """``text`` (a values.yaml, comments kept) with the scalar at ``path`` set to ``value``, quoted; the key
    must be there (a release never adds keys the chart does not know)."""
    lines = text.splitlines(keepends=True)
    start, end = 0, len(lines)
    for depth, key in enumerate(path):
        indent = "  " * depth
        pattern = re.compile(rf"^{re.escape(indent)}{re.escape(key)}:(\s.*)?$")
        found = next((n for n in range(start, end) if pattern.match(lines[n].rstrip("\n"))), None)
        if found is None:
            raise ValueError(f"values.yaml has no {'.'.join(path)}")
        if depth == len(path) - 1:
            lines[found] = f'{indent}{key}: "{value}"\n'
            return "".join(lines)
        # the block under the key: up to the next line as little indented as the key (comments aside)
        start = found + 1
        end = next(
            (
                n
                for n in range(start, end)
                if lines[n].strip() and not lines[n].lstrip().startswith("#") and not lines[n].startswith(indent + "  ")
            ),
            end,
        )
    raise ValueError(f"values.yaml has no {'.'.join(path)}")


def release_values(text: str, registry: Registry, version: str, pushed: dict[str, Pushed]) -> str:
    """The chart's values.yaml for the release: every image under the registry, each one's tag the version and
    its digest pinned."""
    settings = {
        ("imageRegistry",): registry.location,
        ("image", "tag"): version,
        ("image", "digest"): pushed["operator"].digest,
        ("runtimes", "cpu", "tag"): version,
        ("runtimes", "cpu", "digest"): pushed["vllm-cpu"].digest,
    }
    for path, value in settings.items():
        text = set_value(text, path, value)
    loaded = yaml.safe_load(text)
    for path, value in settings.items():
        found = loaded
        for key in path:
            found = found[key]
        if found != value:
            raise ValueError(f"values.yaml's {'.'.join(path)} is {found!r} after the release's edit")
    return text


def package(registry: Registry, version: str, pushed: dict[str, Pushed], out: Path, scratch: Path) -> Path:
    """``<out>/reward-operator-<version>.tgz``: the chart with the release's version, appVersion and values."""
    copy = scratch / "chart" / NAME
    shutil.copytree(CHART, copy, ignore=shutil.ignore_patterns("hack"))
    chart = yaml.safe_load((copy / "Chart.yaml").read_text())
    chart["version"] = chart["appVersion"] = version
    (copy / "Chart.yaml").write_text(yaml.safe_dump(chart, sort_keys=False))
    values = copy / "values.yaml"
    values.write_text(release_values(values.read_text(), registry, version, pushed))
    out.mkdir(parents=True, exist_ok=True)
    run(f"package the chart {version}", "helm", "package", str(copy), "--destination", str(out))
    return out / f"{NAME}-{version}.tgz"


def push(registry: Registry, packaged: Path, version: str, env: dict[str, str]) -> tuple[str, str]:
    """Push the packaged chart; its reference (``<registry>/charts/reward-operator:<version>``) and digest."""
    args = ["push", str(packaged), f"oci://{registry.location}/charts"]
    if registry.username:
        args += ["--username", registry.username, "--password", registry.password or ""]
    if registry.ca_file:
        args += ["--ca-file", str(registry.ca_file)]
    run(f"push the chart to oci://{registry.location}/charts", "helm", *args, secret=registry.password)
    ref = f"{registry.location}/charts/{NAME}:{version}"
    return ref, run(f"digest of {ref}", "crane", "digest", ref, env=env).strip()
