"""The pinned versions, read from ``versions.env`` at the repository's root: their one home.

make includes that file and shell scripts source it; Python reads it here. Standard library only:
``e2e/suites/gpu/preflight.py`` reads the vLLM pin under an interpreter that may have nothing else.
"""

from __future__ import annotations

from pathlib import Path

FILE = Path(__file__).resolve().parents[2] / "versions.env"


def read(path: Path = FILE) -> dict[str, str]:
    """``KEY=value`` lines (blank lines and ``#`` comments aside), as make and the shell read them."""
    pins: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.isidentifier() or not value or value != value.strip() or " " in value:
            raise ValueError(f"{path}:{number}: not a KEY=value line: {line!r}")
        if key in pins:
            raise ValueError(f"{path}:{number}: {key} is set twice")
        pins[key] = value
    return pins


PINS = read()
VLLM = PINS["VLLM_VERSION"]
TORCH = PINS["TORCH_VERSION"]
KSERVE = PINS["KSERVE_VERSION"]
KUBERNETES = PINS["KUBERNETES_VERSION"]
KEDA = PINS["KEDA_VERSION"]
PROMETHEUS = PINS["PROMETHEUS_VERSION"]
PROMETHEUS_OPERATOR = PINS["PROMETHEUS_OPERATOR_VERSION"]
KUBE_ROUTER = PINS["KUBE_ROUTER_VERSION"]
VERSITYGW = PINS["VERSITYGW_VERSION"]
KUEUE = PINS["KUEUE_VERSION"]
CONTAINERD = PINS["CONTAINERD_VERSION"]
KNATIVE_SERVING = PINS["KNATIVE_SERVING_VERSION"]
KNATIVE_KOURIER = PINS["KNATIVE_KOURIER_VERSION"]
ENVOY = PINS["ENVOY_VERSION"]
CRANE = PINS["CRANE_VERSION"]
COSIGN = PINS["COSIGN_VERSION"]
SYFT = PINS["SYFT_VERSION"]
ACTIONLINT = PINS["ACTIONLINT_VERSION"]
