"""Keep the chart's generated parts in step with their sources.

    python charts/reward-operator/hack/sync.py --kube-version X.Y.Z [--check] [--helm PATH]

- files/crds/        <- crds/ (generated from the operator's API types)
- files/runtimes/    <- runtimes/*.yaml (the ClusterServingRuntimes)
- files/dashboards/  <- manifests/grafana/*.json (the one source of the dashboard)
- files/prometheus/  <- manifests/prometheus/prometheusrule.yaml (the one source of the alerts)
- README.md          <- values.yaml and its "# --" comments
- manifests/base/reward-operator.yaml <- `helm template` of the chart's defaults (but peering.enabled:
  false: one --standalone pod), so installs without Helm get the same RBAC and Deployment as the chart

Helm cannot read files outside the chart folder, hence copies; --check (the drift
test) fails when any copy or generated file differs from what this would write.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1]
REPO = CHART.parents[1]
BASE_MANIFEST = REPO / "manifests" / "base" / "reward-operator.yaml"
# the monitoring overlay's scrape objects, rendered from the same chart so that the
# ServiceMonitor selects the base's Service and the PodMonitor matches the chart's
MONITORS_MANIFEST = REPO / "manifests" / "prometheus" / "monitors.yaml"
MONITORS = ("templates/servicemonitor.yaml", "templates/podmonitor.yaml")
# what the kustomize base installs: cluster-wide mode, no monitoring objects (the
# monitoring overlay adds them from manifests/prometheus and manifests/grafana)
BASE_NAMESPACE = "reward-operator"

COPIES = {
    "files/crds": (REPO / "crds", "*.yaml"),
    "files/runtimes": (REPO / "runtimes", "*.yaml"),
    "files/dashboards": (REPO / "manifests" / "grafana", "*.json"),
    "files/prometheus": (REPO / "manifests" / "prometheus", "prometheusrule.yaml"),
}


def wanted_copies() -> dict[Path, bytes]:
    files: dict[Path, bytes] = {}
    for target, (source_dir, pattern) in COPIES.items():
        for source in sorted(source_dir.glob(pattern)):
            files[CHART / target / source.name] = source.read_bytes()
    return files


# ---- README from values.yaml -------------------------------------------------

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):")


def value_docs(text: str) -> dict[str, str]:
    """Dotted key -> the "# --" comment written right above it."""
    docs: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and pending:
            pending.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if not match:
            if not stripped:
                pending = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if pending:
            docs[".".join(key for _, key in stack)] = " ".join(pending)
        pending = []
    return docs


def _leaves(values: dict[str, Any], documented: dict[str, str], prefix: str = "") -> list[tuple[str, Any]]:
    rows = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in documented:
            rows += _leaves(value, documented, f"{path}.")
        else:
            rows.append((path, value))
    return rows


def render_readme() -> str:
    text = (CHART / "values.yaml").read_text()
    docs = value_docs(text)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    intro = (CHART / "hack" / "README.intro.md").read_text().replace("{version}", chart["version"])
    lines = [intro.rstrip(), "", "## Values", "", "| Key | Type | Default | Description |", "|---|---|---|---|"]
    for path, value in _leaves(yaml.safe_load(text), docs):
        if path not in docs:
            raise SystemExit(f"values.yaml: {path} has no '# --' comment")
        kind = {"dict": "object", "str": "string"}.get(type(value).__name__, type(value).__name__)
        default = json.dumps(value).replace("|", "\\|")
        lines.append(f"| `{path}` | {kind} | `{default}` | {docs[path]} |")
    return "\n".join(lines) + "\n"


# ---- the kustomize base, rendered from the chart --------------------------------


def render_base(helm: str, kube_version: str) -> bytes:
    # peering off: kopf's peering CRDs are the chart's crds/, and a ClusterKopfPeering applied in the same
    # `kubectl apply` as its CRD fails the first time; so one --standalone pod (several replicas: the chart)
    return _render(helm, kube_version, ["--set", "peering.enabled=false"], "the chart's default values (peering off)")


def render_monitors(helm: str, kube_version: str) -> bytes:
    monitors = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true"]
    for template in MONITORS:
        monitors += ["--show-only", template]
    return _render(helm, kube_version, monitors, "its ServiceMonitor and PodMonitor")


def _render(helm: str, kube_version: str, extra: list[str], what: str) -> bytes:
    result = subprocess.run(
        [
            helm,
            "template",
            "reward-operator",
            str(CHART),
            "--namespace",
            BASE_NAMESPACE,
            "--kube-version",
            kube_version,
            *extra,
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"helm template failed: {result.stderr}")
    rendered = result.stdout
    documents = []
    for document in yaml.safe_load_all(rendered):
        if not document:
            continue
        metadata = document["metadata"]
        labels = metadata.get("labels") or {}
        # Helm's bookkeeping labels would mislead on an install without Helm
        for key in ("helm.sh/chart", "app.kubernetes.io/managed-by"):
            labels.pop(key, None)
        annotations = metadata.get("annotations") or {}
        if "helm.sh/hook" in annotations:
            continue
        annotations.pop("helm.sh/resource-policy", None)
        if not annotations:
            metadata.pop("annotations", None)
        documents.append(document)
    header = (
        f"# Generated by charts/reward-operator/hack/sync.py from {what}\n"
        f"# (cluster-wide mode, namespace {BASE_NAMESPACE}). Do not edit; change the chart.\n"
    )
    return (header + yaml.safe_dump_all(documents, sort_keys=False, width=120)).encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report what differs; exit 1 if anything does")
    parser.add_argument("--helm", default=shutil.which("helm") or "helm", help="helm binary")
    # helm built without version stamps would say 1.20: make passes KUBERNETES_VERSION of versions.env
    parser.add_argument("--kube-version", required=True, help="Capabilities.KubeVersion for the offline rendering")
    args = parser.parse_args()

    wanted = wanted_copies()
    wanted[CHART / "README.md"] = render_readme().encode()
    if not args.check:
        # the base is rendered from the chart, so the chart's copies come first
        _write(wanted, stale_files(wanted))
    wanted[BASE_MANIFEST] = render_base(args.helm, args.kube_version)
    wanted[MONITORS_MANIFEST] = render_monitors(args.helm, args.kube_version)
    stale = stale_files(wanted)
    differing = [path for path, data in wanted.items() if not path.is_file() or path.read_bytes() != data]
    if args.check:
        for path in differing:
            print(f"out of date: {path.relative_to(REPO)}", file=sys.stderr)
        for path in stale:
            print(f"stale: {path.relative_to(REPO)}", file=sys.stderr)
        if differing or stale:
            print("run: make chart-sync", file=sys.stderr)
            return 1
        return 0
    _write(wanted, stale)
    return 0


def stale_files(wanted: dict[Path, bytes]) -> list[Path]:
    """Copies whose source is gone."""
    return [
        path
        for target in COPIES
        for path in sorted((CHART / target).glob("*"))
        if path.is_file() and path not in wanted
    ]


def _write(wanted: dict[Path, bytes], stale: list[Path]) -> None:
    for path in stale:
        path.unlink()
    for path, data in wanted.items():
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(f"wrote {path.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
