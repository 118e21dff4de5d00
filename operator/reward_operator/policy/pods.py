"""Kubernetes' own word on an InferenceService's pods, for a Ready that KServe leaves unexplained.

KServe v0.20 in Standard mode does not always fill ``status.modelStatus.lastFailureInfo`` when a
container fails: the RewardModel then said only "Deployment does not have minimum availability"
while vLLM crash-looped. This module takes the pods as plain dicts (as the API serves them) and
names the worst container state, with Kubernetes' reason verbatim (api/conditions.py,
POD_FAILURE_REASONS).

A crash-looping container alternates between ``waiting: CrashLoopBackOff`` and ``running`` (not
ready): a restart count above 0 or a last termination is evidence of the crash while the container
is not ready, so the reason stays CrashLoopBackOff (or OOMKilled) until the pod is ready. The image
pull's two reasons alternate as well: the one reported before stays (``previous_reason``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api import conditions
from ..api.kserve import COMPONENT_LABEL, PREDICTOR_COMPONENT, TRANSFORMER_COMPONENT, canary_predictor_name

# The tail of a termination message kept in Ready's message (its last line, cut to this length).
TAIL_CHARS = 200
# Worst first: the runtime's own failures, then what keeps a container from starting at all.
_RANK_OOM, _RANK_CRASH, _RANK_TERMINATED, _RANK_IMAGE, _RANK_CONFIG = range(5)
_IMAGE_PULL = (conditions.IMAGE_PULL_BACK_OFF, conditions.ERR_IMAGE_PULL)
_COMPONENT_ORDER = (PREDICTOR_COMPONENT, TRANSFORMER_COMPONENT)


@dataclass(frozen=True)
class ContainerFailure:
    rank: int
    reason: str
    component: str
    pod: str
    container: str
    init: bool
    restarts: int
    detail: str  # the waiting message, or the last termination: reason, exit code, message's tail

    def message(self) -> str:
        kind = "init container" if self.init else "container"
        restarts = f"{self.restarts} restart" + ("" if self.restarts == 1 else "s")
        return f"{self.component} pod {self.pod}, {kind} {self.container}: {self.reason}, {restarts}; {self.detail}"


def tail(message: str | None) -> str:
    """The last non-empty line of a termination message, cut to TAIL_CHARS."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    return last if len(last) <= TAIL_CHARS else last[: TAIL_CHARS - 3] + "..."


def _termination(terminated: dict[str, Any] | None) -> str:
    if not terminated:
        return "no termination recorded"
    text = f"last terminated: {terminated.get('reason') or 'unknown reason'}, exit code {terminated.get('exitCode')}"
    if line := tail(terminated.get("message")):
        text += f": {line}"
    return text


def _container_failure(
    status: dict[str, Any], component: str, pod: str, init: bool, restarted: bool = True
) -> ContainerFailure | None:
    """What is wrong with one container (None: nothing, or nothing yet). ``restarted``: the pod's
    restartPolicy is Always (KServe's Deployments), so a container that exited is about to crash-loop."""
    if status.get("ready"):
        return None
    state = status.get("state") or {}
    waiting = state.get("waiting") or {}
    terminated_now = state.get("terminated")
    if init and terminated_now and terminated_now.get("exitCode") == 0:
        return None  # an init container that finished its work
    terminated = terminated_now or (status.get("lastState") or {}).get("terminated")
    restarts = int(status.get("restartCount") or 0)
    name = status.get("name") or "?"
    waiting_reason = waiting.get("reason")

    def failure(rank: int, reason: str, detail: str) -> ContainerFailure:
        return ContainerFailure(rank, reason, component, pod, name, init, restarts, detail)

    if waiting_reason in _IMAGE_PULL:
        return failure(_RANK_IMAGE, waiting_reason, tail(waiting.get("message")) or "the image cannot be pulled")
    if waiting_reason in conditions.CONTAINER_CONFIG_REASONS:
        return failure(_RANK_CONFIG, waiting_reason, tail(waiting.get("message")) or waiting_reason)
    if waiting_reason != conditions.CRASH_LOOP_BACK_OFF and terminated is None:
        return None  # starting (ContainerCreating, PodInitializing) or running, never terminated
    if terminated is not None and terminated.get("reason") == conditions.OOM_KILLED:
        return failure(_RANK_OOM, conditions.OOM_KILLED, _termination(terminated))
    if restarts > 0 or waiting_reason == conditions.CRASH_LOOP_BACK_OFF or restarted:
        # also a first exit in a pod that restarts it: reported as the crash loop it becomes at once, so a
        # crash loop is one transition of Ready (one Warning); the exit's own reason is in the message
        return failure(_RANK_CRASH, conditions.CRASH_LOOP_BACK_OFF, _termination(terminated))
    # exited in a pod that does not restart it (restartPolicy Never or OnFailure)
    terminated = terminated or {}
    if terminated.get("exitCode") == 0:
        return None  # it finished its work
    reason = terminated.get("reason")
    reason = reason if reason in conditions.CONTAINER_TERMINATED_REASONS else "Error"
    return failure(_RANK_TERMINATED, reason, _termination(terminated))


def _pod_failures(pod: dict[str, Any], isvc: str, components: tuple[str, ...]) -> list[ContainerFailure]:
    metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
    name = metadata.get("name") or "?"
    component = (metadata.get("labels") or {}).get(COMPONENT_LABEL)
    if component not in components or metadata.get("deletionTimestamp"):
        return []
    if status.get("phase") in ("Failed", "Succeeded"):
        return []  # done for good (evicted, preempted): its ReplicaSet has made another
    if name.startswith(f"{canary_predictor_name(isvc)}-"):
        return []  # a rollout's candidate: Ready never depends on it (CanaryReady says)
    found = []
    for key, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        for container in status.get(key) or []:
            restarted = (pod.get("spec") or {}).get("restartPolicy", "Always") == "Always"
            if (failure := _container_failure(container, component, name, init, restarted)) is not None:
                found.append(failure)
    return found


def worst_container(pods: list[dict[str, Any]], isvc: str, components: tuple[str, ...]) -> ContainerFailure | None:
    """The worst container state among ``pods`` of ``components``: OOMKilled, then CrashLoopBackOff, an
    exit that is not restarted, an image that cannot be pulled, a container that cannot be created; ties go to
    the predictor, then by pod and container name, so the same pods always give the same answer."""
    found = [failure for pod in pods for failure in _pod_failures(pod, isvc, components)]
    if not found:
        return None
    order = {component: index for index, component in enumerate(_COMPONENT_ORDER)}
    return min(found, key=lambda f: (f.rank, order.get(f.component, len(order)), f.pod, not f.init, f.container))


def reason_kept(reason: str, previous_reason: str | None) -> str:
    """``reason``, or the one reported before when the two are one state that Kubernetes alternates
    between (ErrImagePull and ImagePullBackOff), so Ready's reason does not flap with it."""
    if reason in _IMAGE_PULL and previous_reason in _IMAGE_PULL:
        return previous_reason  # type: ignore[return-value]
    return reason
