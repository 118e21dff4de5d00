"""The reward gateway replicas: their rollout figures (GET /canary) for the promotion gates, and a
nudge that makes the kubelet project a moved share or generation into them at once.

The gateway pods are found by the labels KServe puts on a transformer's pods and
asked directly on their serving port, where /canary answers without a token (the
figures only). A replica that is not Ready, has no IP yet, or does not answer in
time is left out: its figures are not the step's, or not there yet.

A rollout's share and the model's generation reach a running gateway through ConfigMaps its pod
mounts. The kubelet writes a ConfigMap's new content into a pod's volume when it syncs that pod: at its
periodic sync (about a minute, measured 66-79 s on the real node), or at once when the pod itself
changes. So when one moves the operator sets an annotation of that value on each gateway pod: a
rollback reaches the running gateways in seconds instead of a minute of the candidate's answers.
Nothing else of the pod is touched, and it neither restarts nor is replaced.
"""

from __future__ import annotations

import concurrent.futures
import json
import urllib.error
import urllib.request
from typing import Any

from ..api.kserve import COMPONENT_LABEL, ISVC_LABEL, TRANSFORMER_COMPONENT
from ..render.gateway import GATEWAY_PORT
from .client import ClusterError, core, translated

CANARY_PATH = "/canary"
# Seconds for one replica's answer: figures, computed without waiting on vLLM.
READ_TIMEOUT = 3.0
MAX_ANSWER_BYTES = 1 << 20
MAX_PARALLEL_READS = 16


def _gateway_pods(namespace: str, isvc: str) -> list[Any]:
    selector = f"{ISVC_LABEL}={isvc},{COMPONENT_LABEL}={TRANSFORMER_COMPONENT}"
    with translated():
        return core().list_namespaced_pod(namespace, label_selector=selector).items


def _ready(pod: Any) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def gateway_addresses(namespace: str, isvc: str) -> list[str]:
    """host:port of each Ready gateway replica of ``isvc``."""
    pods = _gateway_pods(namespace, isvc)
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


def nudge(namespace: str, isvc: str, annotations: dict[str, str]) -> list[str]:
    """Sets ``annotations`` on each gateway pod of ``isvc`` that is not going away and lacks one of them
    (the kubelet syncs a changed pod, projecting the ConfigMaps then); returns the pods nudged.
    Best effort, never raises: a pod gone meanwhile, or a patch refused (an RBAC without it), leaves the
    kubelet's periodic sync to bring the values, as it would without the nudge."""
    try:
        pods = _gateway_pods(namespace, isvc)
    except ClusterError:
        return []
    body = {"metadata": {"annotations": annotations}}
    nudged = []
    for pod in pods:
        held = pod.metadata.annotations or {}
        if pod.metadata.deletion_timestamp or all(held.get(k) == v for k, v in annotations.items()):
            continue
        try:
            with translated():
                core().patch_namespaced_pod(pod.metadata.name, namespace, body)
        except ClusterError:  # Refused included
            continue
        nudged.append(pod.metadata.name)
    return nudged
