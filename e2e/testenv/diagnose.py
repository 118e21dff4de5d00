"""Why a wait on the cluster failed, for its message: the pods concerned as the scheduler and the kubelet see them.

Every real-pod suite waits on something that pods must do (a helm ``--wait``, a Ready condition, a rollout). When
such a wait times out, ``explained`` adds to the failure, for each pod of the namespace (or of a selector): its
phase and node, its conditions that are not True, each container's state and restarts, the pod's own events (the
scheduler's ``FailedScheduling``, the kubelet's pulls, probes and kills) and the last lines of each container that
is not ready (its previous run's, where it restarted). ``pods_report`` is the same text on its own.

``kubectl`` is a callable as ``cluster.kubectl`` is: ``kubectl(*args, check=False)`` -> a completed process.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

Kubectl = Callable[..., subprocess.CompletedProcess]
LOG_LINES = 15  # of each container that is not ready
EVENTS_PER_POD = 8  # the latest ones


def kubectl_at(binary: Path, env: dict | None) -> Kubectl:
    """A ``kubectl`` callable for a binary and an environment (its KUBECONFIG), where no cluster object is at hand."""

    def kubectl(*args: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([str(binary), *args], capture_output=True, text=True, env=env, check=check)

    return kubectl


def _statuses(pod: dict) -> list[dict]:
    status = pod.get("status", {})
    return [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]


def _state(status_of: dict) -> tuple[str, str]:
    """A container's state (``waiting``, ``running``, ``terminated``) and what it says: "" or " (reason, code)"."""
    (what, detail), *_ = status_of.get("state", {}).items() or [("unknown", {})]
    said = ", ".join(str(detail[key]) for key in ("reason", "exitCode", "message") if key in detail)
    return what, f" ({said})" if said else ""


def pods_line(kubectl: Kubectl, namespace: str) -> str:
    """The namespace's pods in one line, each with its phase and its containers that are not ready: a long wait's
    progress."""
    listed = kubectl("get", "pods", "-n", namespace, "-o", "json", check=False)
    described = []
    for pod in json.loads(listed.stdout or "{}").get("items", []) if listed.returncode == 0 else []:
        unready = [f"{s['name']} {''.join(_state(s))}" for s in _statuses(pod) if not s.get("ready")]
        detail = f" ({'; '.join(unready)})" if unready else ""
        described.append(f"{pod['metadata']['name']} {pod.get('status', {}).get('phase')}{detail}")
    return ", ".join(described) or "no pod yet"


def _container_lines(kubectl: Kubectl, namespace: str, pod: dict) -> list[str]:
    lines = []
    for status_of in _statuses(pod):
        name, restarts = status_of["name"], status_of.get("restartCount", 0)
        what, said = _state(status_of)
        lines.append(f"  {name}: {what}{said}, ready {status_of.get('ready')}, restarts {restarts}")
        if status_of.get("ready") or (what == "waiting" and not restarts):
            continue  # a ready container, or one that never ran, has no log to tell
        logs = kubectl(
            "logs", "-n", namespace, pod["metadata"]["name"], "-c", name, f"--tail={LOG_LINES}",
            *(["--previous"] if restarts and what != "running" else []), check=False,
        )  # fmt: skip
        tail = (logs.stdout or logs.stderr).strip().splitlines()[-LOG_LINES:]
        lines += [f"    | {line[:300]}" for line in tail]
    return lines


def pods_report(kubectl: Kubectl, namespace: str, selector: str = "") -> str:
    """The pods of ``namespace`` (those ``selector`` labels, when given): state, conditions, events, log tails."""
    listed = kubectl("get", "pods", "-n", namespace, *(["-l", selector] if selector else []), "-o", "json", check=False)
    if listed.returncode != 0:
        return f"(no pods listed in {namespace}: {listed.stderr.strip()})"
    pods = json.loads(listed.stdout).get("items", [])
    got = kubectl("get", "events", "-n", namespace, "-o", "json", check=False)
    events = sorted(
        json.loads(got.stdout or "{}").get("items", []) if got.returncode == 0 else [],
        key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "",
    )
    where = f"{namespace}" + (f" ({selector})" if selector else "")
    lines = [f"pods in {where}: {len(pods)}"]
    for pod in pods:
        meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
        going = f", deleted {meta['deletionTimestamp']}" if meta.get("deletionTimestamp") else ""
        lines.append(f"pod {meta['name']}: {status.get('phase')} on {spec.get('nodeName') or '(no node)'}{going}")
        for item in status.get("conditions", []):
            if item.get("status") != "True":
                why = ": ".join(filter(None, (item.get("reason"), item.get("message"))))
                lines.append(f"  condition {item['type']}={item.get('status')}{f' ({why})' if why else ''}")
        lines += _container_lines(kubectl, namespace, pod)
        own = [e for e in events if e.get("involvedObject", {}).get("name") == meta["name"]]
        lines += [f"  {_event_line(event)}" for event in own[-EVENTS_PER_POD:]]
    # what no pod shows: a ReplicaSet that could not create one (admission, quota), a Deployment's rollout
    names = {pod["metadata"]["name"] for pod in pods}
    others = [e for e in events if e.get("type") == "Warning" and e.get("involvedObject", {}).get("name") not in names]
    if others:
        lines.append("other Warning events of the namespace:")
        lines += [f"  {_event_line(event)}" for event in others[-EVENTS_PER_POD:]]
    return "\n".join(lines)


def _event_line(event: dict) -> str:
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
    involved = event.get("involvedObject", {})
    count = f" x{event['count']}" if (event.get("count") or 1) > 1 else ""
    about = f"{involved.get('kind')}/{involved.get('name')}"
    return f"event {event.get('type')} {event.get('reason')}{count} [{source}] {about}: {event.get('message')}"


@contextlib.contextmanager
def explained(kubectl: Kubectl, namespace: str, selector: str = "") -> Iterator[None]:
    """Around a wait: a failure (a timeout's AssertionError, a failed command) leaves with the pods' report."""
    try:
        yield
    except (AssertionError, subprocess.CalledProcessError, TimeoutError) as failure:
        failure.add_note(pods_report(kubectl, namespace, selector))
        raise
