"""A burst of requests at a RewardModel whose predictor is at zero pods, and what the wake took.

Sent from the client pod of ``served.client_namespace`` to the RewardModel's in-cluster URL, all at once
(one thread each), as a training step's scoring arrives: per-sample ``/get_reward`` calls as OpenRLHF sends
them and GRPO groups on ``/v1/rewards`` as verl sends them. The pod shares the host's clock, so its send
and answer times line up with the predictor pod's (Kubernetes' whole seconds) and with vLLM's own ready
line (its log's stamp). Shared by the wake suites of both modes.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from reward_testing.scoring_cases import TOLERANCE
from reward_testing.waiting import wait_until

from .helpers import ISVC_LABEL, condition, get_json
from .served import CLIENT, what_runs

PER_SAMPLE = 32  # /get_reward requests of one query each (OpenRLHF)
GROUPS, GROUP = 32, 4  # /v1/rewards requests of one GRPO group each (verl)
# uvicorn's line once an app serves: vLLM's API server and the gateway both run on uvicorn
READY_LINE = "Application startup complete"
VLLM_READY_EVENT = "vLLM ready (its log)"  # as predictor_timeline names it
ASLEEP_TIMEOUT = 300  # the autoscaler's window and grace period, and the pods' termination


def pods(cluster, namespace: str, isvc: str, component: str, going: bool = False) -> list[dict]:
    """The pods of one component (predictor, transformer) of InferenceService ``isvc`` that are not going (with
    ``going``, those that are going too)."""
    listed = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={isvc},component={component}") or {}
    return [pod for pod in listed.get("items", []) if going or not pod["metadata"].get("deletionTimestamp")]


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def at_zero(cluster, namespace: str, isvc: str, component: str = "predictor", timeout: float = ASLEEP_TIMEOUT) -> None:
    """Wait until the component has no pod at all (its autoscaler took it to zero, and the pods are gone). A pod
    that is going still holds its CPU on the node until it has gone (Knative gives a revision's pods its request
    timeout to drain): a burst sent before would find the woken pod Pending behind it."""
    wait_until(f"{isvc}'s {component} at zero pods", lambda: not pods(cluster, namespace, isvc, component, going=True),
               timeout=timeout, interval=2)  # fmt: skip


def asleep(cluster, namespace: str, name: str, timeout: float = ASLEEP_TIMEOUT) -> dict:
    """The RewardModel ``name`` once its predictor has no pod and its status says so (ScaledToZero=True);
    returns it as stored."""
    at_zero(cluster, namespace, name, timeout=timeout)

    def said() -> dict | None:
        stored = get_json(cluster, "rewardmodel", name, "-n", namespace)
        return stored if (condition(stored, "ScaledToZero") or {}).get("status") == "True" else None

    return wait_until(f"{name}'s ScaledToZero=True", said, timeout=60, interval=1)


def burst_calls() -> list[tuple[str, dict, list[str]]]:
    """(path, body, texts scored): one query per /get_reward call, one GRPO group per /v1/rewards call."""
    calls = [("/get_reward", {"query": [f"sample {n}: the answer is {7 * n}"]}) for n in range(PER_SAMPLE)]
    for g in range(GROUPS):
        items = [{"text": f"group {g}, completion {k}: {'yes ' * (k + 1)}", "group": f"g{g}"} for k in range(GROUP)]
        calls.append(("/v1/rewards", {"items": items}))
    return [(path, body, body.get("query") or [item["text"] for item in body["items"]]) for path, body in calls]


# Run in the client pod: every call at once (one thread each), each answer's status, body and the time it came
# (the pod shares the host's clock), with the time the first was sent, as one JSON object.
BURST = textwrap.dedent(
    """
    import json, sys, threading, time, urllib.error, urllib.request
    url, calls, timeout = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    answers = [None] * len(calls)
    def post(n, path, body):
        request = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                answers[n] = {"status": answer.status, "body": json.load(answer), "at": time.time()}
        except urllib.error.HTTPError as error:
            answers[n] = {"status": error.code, "body": error.read().decode(), "at": time.time()}
        except OSError as error:
            answers[n] = {"status": 0, "body": str(error), "at": time.time()}
    threads = [threading.Thread(target=post, args=(n, *call)) for n, call in enumerate(calls)]
    sent = time.time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps({"sent": sent, "answers": answers}))
    """
)


@dataclass(frozen=True)
class Burst:
    sent: float  # epoch seconds: when the first call went
    answers: list[dict]  # per call, in order: status (0: no answer at all), body, at (epoch seconds)

    @property
    def first_answer(self) -> float:
        return min((a["at"] for a in self.answers if a["status"] == 200), default=float("nan"))

    @property
    def last_answer(self) -> float:
        return max((a["at"] for a in self.answers if a["status"] == 200), default=float("nan"))


def burst(cluster, namespace: str, url: str, calls: list[tuple[str, dict]], timeout: float) -> Burst:
    """POST every ``(path, body)`` of ``calls`` to ``url`` at once from the client pod (one exec); each waits
    ``timeout`` seconds at most for its answer."""
    command = ["python", "-c", BURST, url.rstrip("/"), json.dumps(calls), str(timeout)]
    printed = cluster.kubectl("exec", "-n", namespace, CLIENT, "--", *command)
    result = json.loads(printed.stdout.strip().splitlines()[-1])
    return Burst(result["sent"], result["answers"])


def kubernetes_time(stamp: str) -> float:
    """A Kubernetes timestamp (RFC 3339, nanoseconds or none) as seconds since the epoch."""
    found = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z", stamp)
    assert found, stamp
    whole = datetime.fromisoformat(found[1] + "+00:00").timestamp()
    return whole + float(f"0.{found[2] or 0}")


def _started(cluster, namespace: str, pod: dict) -> tuple[float, float, float]:
    """When a KServe pod was created, its serving container (``kserve-container``, vLLM's or the gateway's)
    started, and that container logged uvicorn's ready line (the log's own stamp)."""
    (container,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "kserve-container"]
    logs = cluster.kubectl("logs", "-n", namespace, pod["metadata"]["name"], "-c", "kserve-container", "--timestamps")
    ready_line = next(line for line in logs.stdout.splitlines() if READY_LINE in line)
    return (
        kubernetes_time(pod["metadata"]["creationTimestamp"]),
        kubernetes_time(container["state"]["running"]["startedAt"]),
        kubernetes_time(ready_line.split(" ", 1)[0]),
    )


def predictor_timeline(cluster, namespace: str, isvc: str, since: float) -> dict[str, float]:
    """The predictor pod woken after ``since`` (epoch seconds): when it was created, vLLM's container started,
    and vLLM's own ready line (its log's stamp); the download's end where KServe's storage initializer ran."""
    (pod,) = pods(cluster, namespace, isvc, "predictor")
    created, started, ready_line = _started(cluster, namespace, pod)
    timeline = {"predictor pod created": created, "vLLM container started": started, VLLM_READY_EVENT: ready_line}
    for initializer in pod["status"].get("initContainerStatuses") or []:
        timeline["storage initializer done (download)"] = kubernetes_time(
            initializer["state"]["terminated"]["finishedAt"]
        )
    assert all(at >= since - 1 for at in timeline.values()), ("a pod from before", timeline)
    return timeline


def gateway_timeline(cluster, namespace: str, isvc: str, since: float) -> dict[str, float]:
    """The gateway pod woken after ``since`` (epoch seconds), where the gateway was at zero too: its pod created,
    its container started and its ready line; empty where every gateway pod was there before."""
    woken = [p for p in pods(cluster, namespace, isvc, "transformer")
             if kubernetes_time(p["metadata"]["creationTimestamp"]) >= since - 1]  # fmt: skip
    if not woken:
        return {}
    created, started, ready_line = _started(cluster, namespace, woken[0])
    return {"gateway pod created": created, "gateway container started": started, "gateway ready (its log)": ready_line}


@dataclass(frozen=True)
class Wake:
    """One burst at zero and what it took (seconds after the first request)."""

    how: str
    sent: int
    answered: int
    failed: int  # answered, but not 200
    lost: int  # no answer at all
    max_diff: float  # the largest |diff| of an answer to transformers' score
    timeline: dict[str, float]  # the predictor's pod, vLLM, the first and last answers

    @property
    def first_answer_s(self) -> float:
        return self.timeline["first answer"]

    @property
    def ready_line_to_first_answer_s(self) -> float:
        return self.timeline["first answer"] - self.timeline[VLLM_READY_EVENT]

    def report(self) -> str:
        lines = [
            f"{self.how}: {self.sent} requests at once; {self.answered} answered, {self.failed} failed, {self.lost} "
            f"lost; max |diff| vs transformers {self.max_diff:.2e}"
        ]
        lines += [f"  {what:<40} +{at:6.2f} s" for what, at in sorted(self.timeline.items(), key=lambda e: e[1])]
        lines.append(f"  vLLM's ready line -> first answer {self.ready_line_to_first_answer_s:.2f} s")
        return "\n".join(lines)

    def assert_every_request_got_the_models_scores(self) -> None:
        assert self.answered == self.sent, self.report()
        assert self.max_diff <= TOLERANCE, self.report()
        assert self.timeline["first answer"] >= self.timeline[VLLM_READY_EVENT] - 1, (
            f"answered before vLLM was up: not the model's scores\n{self.report()}"
        )


def measure(cluster, namespace: str, isvc: str, url: str, want: dict[str, float], how: str, timeout: float) -> Wake:
    """``burst_calls`` to ``url`` at once, each answer compared with ``want`` (text -> transformers' reward),
    and the woken predictor's timeline (the InferenceService ``isvc``)."""
    calls = burst_calls()
    sent = burst(cluster, namespace, url, [(path, body) for path, body, _ in calls], timeout)
    diffs = []
    for (_, _, scored), answer in zip(calls, sent.answers, strict=True):
        if answer["status"] == 200:
            got = answer["body"]["rewards"]
            assert len(got) == len(scored), answer
            diffs += [abs(g - want[text]) for g, text in zip(got, scored, strict=True)]
    statuses = [answer["status"] for answer in sent.answers]
    if not all(ready(pod) for pod in pods(cluster, namespace, isvc, "predictor")):
        raise AssertionError(
            f"{how}: answers {Counter(statuses)} (0: none), the woken predictor not Ready\n"
            f"{what_runs(cluster, namespace)}"
        )
    timeline = {what: at - sent.sent for what, at in predictor_timeline(cluster, namespace, isvc, sent.sent).items()}
    timeline |= {what: at - sent.sent for what, at in gateway_timeline(cluster, namespace, isvc, sent.sent).items()}
    timeline |= {"first answer": sent.first_answer - sent.sent, "last answer": sent.last_answer - sent.sent}
    return Wake(
        how,
        len(calls),
        statuses.count(200),
        sum(1 for status in statuses if status not in (0, 200)),
        statuses.count(0),
        max(diffs, default=float("nan")),
        timeline,
    )


@contextmanager
def keda_reaches_the_gateway(cluster, namespace: str, isvc: str) -> Iterator[str]:
    """A Standard-mode RewardModel scaled by KEDA (its ScaledObject made by the operator): KEDA's operator, on
    the host with the control plane's private hosts file (``testenv.keda``), resolves the gateway's scaler
    names to its one Ready pod until the block ends; returns once KEDA holds the gateway's stream open (the
    gateway's log says so). Yields the pod's address."""
    assert cluster.hosts is not None, "KEDA's hosts file: the local control plane with KEDA"

    def scaled_object() -> dict | None:
        found = cluster.kubectl("get", "scaledobject", f"{isvc}-predictor", "-n", namespace, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    scaler = wait_until("the operator's ScaledObject", scaled_object, timeout=120)
    host = scaler["spec"]["triggers"][0]["metadata"]["scalerAddress"].rsplit(":", 1)[0]

    def one_ready_gateway() -> dict | None:
        up = [pod for pod in pods(cluster, namespace, isvc, "transformer") if pod["status"].get("podIP") and ready(pod)]
        return up[0] if len(up) == 1 else None

    pod = wait_until("one Ready gateway pod", one_ready_gateway, timeout=300)
    address, name = pod["status"]["podIP"], pod["metadata"]["name"]
    with cluster.hosts.names(address, [host, host.removesuffix(".cluster.local")]):
        wait_until(
            f"KEDA's operator holding the gateway's StreamIsActive open ({name})",
            lambda: (
                "KEDA holds StreamIsActive open"
                in cluster.kubectl("logs", "-n", namespace, name, "-c", "kserve-container", check=False).stdout
            ),
            timeout=120,
            interval=2,
        )
        yield address
