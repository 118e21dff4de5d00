"""Reading an InferenceService's pods for policy (cluster/gather.py): one list by label, plain dicts."""

from __future__ import annotations

from types import SimpleNamespace

from kubernetes import client

from reward_operator.cluster import gather
from reward_operator.policy.pods import worst_container


def test_one_list_by_the_inference_service_label_gives_the_dicts_policy_reads(monkeypatch):
    calls = []
    crashing = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="rm-predictor-6b-x", labels={"serving.kserve.io/inferenceservice": "rm", "component": "predictor"}
        ),
        status=client.V1PodStatus(
            container_statuses=[
                client.V1ContainerStatus(
                    name="kserve-container",
                    image="vllm",
                    image_id="",
                    ready=False,
                    restart_count=2,
                    state=client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="CrashLoopBackOff")),
                    last_state=client.V1ContainerState(
                        terminated=client.V1ContainerStateTerminated(reason="OOMKilled", exit_code=137)
                    ),
                )
            ]
        ),
    )

    def list_namespaced_pod(namespace, label_selector):
        calls.append((namespace, label_selector))
        return SimpleNamespace(items=[crashing])

    monkeypatch.setattr(gather, "core", lambda: SimpleNamespace(list_namespaced_pod=list_namespaced_pod))
    pods = gather.inference_service_pods("ns", "rm")
    assert calls == [("ns", "serving.kserve.io/inferenceservice=rm")]
    status = pods[0]["status"]["containerStatuses"][0]
    assert status["restartCount"] == 2 and status["lastState"]["terminated"]["exitCode"] == 137
    failure = worst_container(pods, "rm", ("predictor", "transformer"))
    assert failure is not None and failure.reason == "OOMKilled"
