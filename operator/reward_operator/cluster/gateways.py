"""Reads each reward gateway replica's rollout figures (GET /canary), for the promotion gates.

The gateway pods are found by the labels KServe puts on a transformer's pods and
asked directly on their serving port, where /canary answers without a token (the
figures only). A replica that is not Ready, has no IP yet, or does not answer in
time is left out: its figures are not the step's, or not there yet.
"""

from __future__ import annotations

import concurrent.futures
import json
import urllib.error
import urllib.request
from typing import Any

from ..api.kserve import COMPONENT_LABEL, ISVC_LABEL, TRANSFORMER_COMPONENT
from ..render.gateway import GATEWAY_PORT
from .client import core, translated

CANARY_PATH = "/canary"
# Seconds for one replica's answer: figures, computed without waiting on vLLM.
READ_TIMEOUT = 3.0
MAX_ANSWER_BYTES = 1 << 20
MAX_PARALLEL_READS = 16


def _ready(pod: Any) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def gateway_addresses(namespace: str, isvc: str) -> list[str]:
    """host:port of each Ready gateway replica of ``isvc``."""
    selector = f"{ISVC_LABEL}={isvc},{COMPONENT_LABEL}={TRANSFORMER_COMPONENT}"
    with translated():
        pods = core().list_namespaced_pod(namespace, label_selector=selector).items
    return [
        f"{pod.status.pod_ip}:{GATEWAY_PORT}"
        for pod in pods
        if pod.status and pod.status.pod_ip and not pod.metadata.deletion_timestamp and _ready(pod)
    ]


def canary_figures(address: str, timeout: float = READ_TIMEOUT) -> dict[str, Any] | None:
    """One replica's GET /canary, or None (no rollout configured there, unreachable, not JSON)."""
    try:
        with urllib.request.urlopen(f"http://{address}{CANARY_PATH}", timeout=timeout) as response:
            answer = json.loads(response.read(MAX_ANSWER_BYTES))
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return answer if isinstance(answer, dict) else None


def rollout_figures(namespace: str, isvc: str) -> list[dict[str, Any]]:
    """The GET /canary answers of the gateway replicas of ``isvc`` that gave one, asked at once (a look
    takes one READ_TIMEOUT at most, however many replicas hang)."""
    addresses = gateway_addresses(namespace, isvc)
    if not addresses:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(addresses), MAX_PARALLEL_READS)) as pool:
        found = list(pool.map(canary_figures, addresses))
    return [figures for figures in found if figures is not None]
