"""The RewardModel CRD on a real API server: bad specs stopped at the door with
messages that say what to fix; kubectl's columns and explain teach the API."""

from __future__ import annotations

import json

import pytest
import yaml

from reward_operator.render import render_reward_model
from reward_testing import judge_cases
from reward_testing.paths import GOLDEN, REPO


def base() -> dict:
    return yaml.safe_load((REPO / "manifests/samples/rewardmodel-sequence-standard.yaml").read_text())


def with_changes(change) -> dict:
    obj = base()
    change(obj)
    return obj


def _set(path: str, value):
    def change(obj: dict) -> None:
        node = obj
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    return change


def _drop(path: str):
    def change(obj: dict) -> None:
        node = obj
        *parents, leaf = path.split(".")
        for key in parents:
            node = node[key]
        del node[leaf]

    return change


IN_WITHOUT_VALUES = [{"key": "app", "operator": "In"}]
INVALID = {
    "uri-scheme": (_set("spec.model.uri", "ftp://models/rm"), "model.uri must be a storage URI"),
    "missing-uri": (_drop("spec.model.uri"), "spec.model.uri: Required value"),
    "unknown-kind": (_set("spec.model.kind", "pairwise"), 'Unsupported value: "pairwise"'),
    "min-above-max": (
        lambda o: o["spec"]["serving"].update(minReplicas=5, maxReplicas=2),
        "serving.maxReplicas must be at least serving.minReplicas",
    ),
    "zero-in-standard-without-gateway": (
        lambda o: o["spec"].update(serving={"minReplicas": 0, "maxReplicas": 2}, gateway={"enabled": False}),
        "serving.minReplicas: 0 in Standard mode needs gateway.enabled: true",
    ),
    "scale-down-delay-with-kserves-hpa": (
        _set("spec.serving.scaleDownDelay", "10m"),
        "serving.scaleDownDelay needs an autoscaler that honours it: Knative mode, or in Standard mode KEDA",
    ),
    "scale-down-delay-in-knative-over-an-hour": (
        _set("spec.serving", {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2, "scaleDownDelay": "61m"}),
        "serving.scaleDownDelay in Knative mode must be at most 1h in whole seconds",
    ),
    "scale-down-delay-in-knative-not-whole-seconds": (
        _set("spec.serving", {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2, "scaleDownDelay": "1500ms"}),
        "serving.scaleDownDelay in Knative mode must be at most 1h in whole seconds",
    ),
    "initial-scale-in-standard": (
        _set("spec.serving.initialScale", 2),
        "serving.initialScale is Knative's initial-scale and needs serving.mode: Knative",
    ),
    "initial-scale-below-minimum": (
        _set("spec.serving", {"mode": "Knative", "minReplicas": 1, "maxReplicas": 2, "initialScale": 0}),
        "serving.initialScale must be between serving.minReplicas and serving.maxReplicas",
    ),
    "initial-scale-above-maximum": (
        _set("spec.serving", {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2, "initialScale": 3}),
        "serving.initialScale must be between serving.minReplicas and serving.maxReplicas",
    ),
    "scaling-window-in-standard": (
        _set("spec.serving.scalingWindow", "2m"),
        "serving.scalingWindow is Knative's stable window and needs serving.mode: Knative",
    ),
    "scaling-window-under-six-seconds": (
        _set("spec.serving", {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2, "scalingWindow": "5s"}),
        "serving.scalingWindow must be 6s to 1h in whole seconds",
    ),
    "scaling-window-over-an-hour": (
        _set("spec.serving", {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2, "scalingWindow": "1h1s"}),
        "serving.scalingWindow must be 6s to 1h in whole seconds",
    ),
    "scaling-window-not-whole-seconds": (
        _set("spec.serving", {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2, "scalingWindow": "6500ms"}),
        "serving.scalingWindow must be 6s to 1h in whole seconds",
    ),
    "scaling-window-not-a-duration": (
        _set("spec.serving", {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2, "scalingWindow": "a minute"}),
        "spec.serving.scalingWindow",
    ),
    "scale-down-delay-under-a-second": (
        _set("spec.serving", {"minReplicas": 0, "maxReplicas": 2, "scaleDownDelay": "500ms"}),
        "serving.scaleDownDelay must be at least 1s",
    ),
    "scale-down-delay-not-a-duration": (
        _set("spec.serving", {"minReplicas": 0, "maxReplicas": 2, "scaleDownDelay": "ten minutes"}),
        "spec.serving.scaleDownDelay",
    ),
    "canary-at-zero-in-standard": (
        lambda o: o["spec"].update(
            serving={"minReplicas": 0, "maxReplicas": 2}, canary={"model": {"uri": "hf://org/rm-v2"}}
        ),
        "spec.canary in Standard mode needs serving.minReplicas of at least 1",
    ),
    "gpus-vs-tensor-parallel": (
        lambda o: o["spec"]["model"].update(tensorParallelSize=4),
        "resources.gpus must equal model.tensorParallelSize",
    ),
    "owned-extra-arg": (
        _set("spec.model.extraArgs", ["--served-model-name=other"]),
        "model.extraArgs may not set",
    ),
    "step-tag-on-sequence": (_set("spec.model.stepTagId", 7), "apply only to kind: process"),
    # a process model's settings that give a wrong number or none on vLLM 0.32 (each reproduced on a
    # tiny Qwen2ForProcessRewardModel: reward_testing.tiny_models)
    "process-without-step-tag": (
        _set("spec.model.kind", "process"),
        "model.stepTagId is required for kind: process",
    ),
    "process-returned-vocabulary-ids": (
        lambda o: o["spec"]["model"].update(kind="process", stepTagId=7, returnedTokenIds=[648, 387]),
        "model.returnedTokenIds may only be [0, 1] (or unset, the same): they index the score head's",
    ),
    "process-returned-one-label": (
        lambda o: o["spec"]["model"].update(kind="process", stepTagId=7, returnedTokenIds=[1]),
        "spec.model.returnedTokenIds",
    ),
    "process-returned-labels-swapped": (
        lambda o: o["spec"]["model"].update(kind="process", stepTagId=7, returnedTokenIds=[1, 0]),
        "[1, 0] inverts every score",
    ),
    "env-value-and-ref": (
        _set(
            "spec.env",
            [{"name": "X", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        ),
        "env[] takes value or valueFrom, not both",
    ),
    "bad-memory": (_set("spec.resources.memory", "lots"), "spec.resources.memory"),
    "string-replicas": (_set("spec.serving.maxReplicas", "four"), "must be of type integer"),
    "gateway-template-without-template": (
        _set("spec.gateway", {"chatTemplateMode": "gateway"}),
        "gateway.chatTemplateMode: gateway renders model.chatTemplate",
    ),
    "gateway-template-eos-unknown": (
        lambda o: (
            o["spec"]["model"].update(chatTemplate="{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"),
            o["spec"].update(gateway={"chatTemplateMode": "gateway"}),
        ),
        "model.chatTemplate writes eos_token, which the gateway cannot learn from vLLM: set gateway.eosToken",
    ),
    "bad-name": (_set("metadata.name", "9-" + "x" * 50), "metadata.name must start with a letter"),
    # what KServe v0.20 would refuse later, refused at the door with the reason
    "go-template-in-extra-args": (
        _set("spec.model.extraArgs", ["--override-generation-config={{x}}"]),
        "model.extraArgs may not contain '{{'",
    ),
    "go-template-in-env": (
        _set("spec.env", [{"name": "X", "value": "{{ .Name }}"}]),
        "env[].value may not contain '{{'",
    ),
    "pythonpath": (_set("spec.env", [{"name": "PYTHONPATH", "value": "/x"}]), "KServe refuses PYTHONPATH"),
    "target-concurrency-in-standard-with-nothing-to-scale": (
        _set("spec.serving", {"minReplicas": 2, "maxReplicas": 2, "targetConcurrency": 64}),
        "serving.targetConcurrency in Standard mode scales the predictor between serving.minReplicas and "
        "serving.maxReplicas through KEDA: set serving.maxReplicas above serving.minReplicas",
    ),
    "target-concurrency-in-standard-without-gateway": (
        lambda o: o["spec"].update(
            serving={"minReplicas": 1, "maxReplicas": 4, "targetConcurrency": 64}, gateway={"enabled": False}
        ),
        "serving.targetConcurrency in Standard mode needs gateway.enabled: true",
    ),
    "knative-timeout-over-600": (
        _set("spec.serving", {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2, "timeoutSeconds": 900}),
        "Knative refuses revision timeouts above 600s",
    ),
    "knative-gateway-waits-longer-than-knative": (
        lambda o: (
            o["spec"].update(serving={"mode": "Knative", "minReplicas": 0, "maxReplicas": 2}),
            o["spec"].update(gateway={"scaleFromZeroTimeoutSeconds": 500}),
        ),
        "must be at most 600 in Knative mode",
    ),
    "hpa-without-cpu": (_drop("spec.resources.cpu"), "resources.cpu is needed when serving.maxReplicas"),
    "hf-token-key-kserve-cannot-read": (
        _set("spec.credentials", {"huggingFaceToken": {"name": "hf", "key": "token"}}),
        "credentials.huggingFaceToken.key must be HF_TOKEN for hf:// models",
    ),
    # gateway.allowedClients (NetworkPolicy peers)
    "allowed-client-without-selectors": (
        _set("spec.gateway", {"allowedClients": [{"podSelector": {}}, {}]}),
        "gateway.allowedClients[] needs namespaceSelector, podSelector or both",
    ),
    "allowed-clients-empty": (_set("spec.gateway", {"allowedClients": []}), "should have at least 1 items"),
    "allowed-clients-without-gateway": (
        _set("spec.gateway", {"enabled": False, "allowedClients": [{"podSelector": {}}]}),
        "gateway.allowedClients restricts who reaches the gateway, so it needs gateway.enabled: true",
    ),
    "monitoring-without-allowed-clients": (
        _set("spec.gateway", {"monitoringNamespaceSelector": {}}),
        "gateway.monitoringNamespaceSelector admits scrapers past the policies gateway.allowedClients makes",
    ),
    # gateway.scheduling (coalescing and fair share)
    "scheduling-tuned-with-coalescing-off": (
        _set("spec.gateway", {"scheduling": {"coalesce": False, "maxWaitMilliseconds": 5}}),
        "gateway.scheduling.maxWaitMilliseconds, maxItemsPerCall, maxCallsInFlight and maxCallMilliseconds tune "
        "coalescing",
    ),
    "scheduling-weights-with-coalescing-off": (
        _set("spec.gateway", {"scheduling": {"coalesce": False, "clients": [{"name": "a", "weight": 2}]}}),
        "gateway.scheduling.clients and defaultClientWeight weigh clients in the gateway's queue",
    ),
    "scheduling-weights-with-fair-share-off": (
        _set("spec.gateway", {"scheduling": {"fairShare": False, "defaultClientWeight": 2}}),
        "gateway.scheduling.clients and defaultClientWeight are fair-share weights",
    ),
    "scheduling-client-twice": (
        _set("spec.gateway", {"scheduling": {"clients": [{"name": "a", "weight": 1}, {"name": "a", "weight": 2}]}}),
        "Duplicate value",
    ),
    "scheduling-weight-zero": (
        _set("spec.gateway", {"scheduling": {"clients": [{"name": "a", "weight": 0}]}}),
        "gateway.scheduling.clients[].weight must be at least 0.001",
    ),
    "scheduling-without-gateway": (
        _set("spec.gateway", {"enabled": False, "scheduling": {"coalesce": True}}),
        "gateway.scheduling tunes how the gateway calls vLLM, so it needs gateway.enabled: true",
    ),
    # spec.canary (the canary rollout)
    "canary-share-in-shadow": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "percent": 10}),
        "canary.percent and canary.steps need canary.mode: split",
    ),
    "canary-split-without-share": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "mode": "split"}),
        "canary.mode: split needs canary.percent (a fixed share) or canary.steps",
    ),
    "canary-split-with-both": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "mode": "split", "percent": 5, "steps": [10]}),
        "canary.mode: split needs canary.percent (a fixed share) or canary.steps",
    ),
    "canary-steps-decreasing": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "mode": "split", "steps": [50, 10]}),
        "canary.steps must increase",
    ),
    "canary-steps-repeated": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "mode": "split", "steps": [10, 10, 50]}),
        "Duplicate value",
    ),
    "canary-interval-too-short": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "interval": "10s"}),
        "canary.interval must be at least 30s",
    ),
    "canary-interval-not-a-duration": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "interval": "ten minutes"}),
        "spec.canary.interval",
    ),
    "canary-replicas-over-maximum": (
        lambda o: o["spec"].update(
            serving={"mode": "Knative", "minReplicas": 0, "maxReplicas": 2},
            canary={"model": {"uri": "hf://org/rm-v2"}, "replicas": 3},
        ),
        "canary.replicas may not exceed serving.maxReplicas",
    ),
    "canary-without-gateway": (
        lambda o: o["spec"].update(gateway={"enabled": False}, canary={"model": {"uri": "hf://org/rm-v2"}}),
        "spec.canary needs gateway.enabled: true",
    ),
    "canary-replicas-over-stable-minimum": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "replicas": 2}),
        "canary.replicas may not exceed serving.minReplicas",
    ),
    "canary-larger-than-kserve-makes-under-keda": (
        lambda o: o["spec"].update(
            serving={"minReplicas": 2, "maxReplicas": 4, "targetConcurrency": 8},
            canary={"model": {"uri": "hf://org/rm-v2"}, "replicas": 2},
        ),
        "canary.replicas must be 1 with serving.targetConcurrency in Standard mode",
    ),
    "canary-gpus-vs-tensor-parallel": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2", "tensorParallelSize": 2}}),
        "the candidate's GPUs (canary.resources.gpus, else resources.gpus) must equal its tensorParallelSize",
    ),
    "canary-uri-scheme": (
        _set("spec.canary", {"model": {"uri": "ftp://models/rm"}}),
        "canary.model.uri must be a storage URI",
    ),
    "canary-owned-extra-arg": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2", "extraArgs": ["--max-model-len=8"]}}),
        "canary.model.extraArgs may not set",
    ),
    "canary-step-tag-on-sequence": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2", "stepTagId": 3}}),
        "canary.model.stepTagId and canary.model.returnedTokenIds apply only to model.kind: process",
    ),
    "canary-returned-vocabulary-ids": (
        lambda o: (
            o["spec"]["model"].update(kind="process", stepTagId=7),
            o["spec"].update(canary={"model": {"uri": "hf://org/rm-v2", "returnedTokenIds": [5, 9]}}),
        ),
        "canary.model.returnedTokenIds may only be [0, 1]",
    ),
    "canary-agreement-over-one": (
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "minAgreement": 1.5}),
        "spec.canary.minAgreement",
    ),
    "canary-client-header-without-client-stickiness": (
        _set(
            "spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "mode": "split", "percent": 5, "clientHeader": "X-Job"}
        ),
        "canary.clientHeader applies to canary.sticky: client",
    ),
    "cache-of-a-pvc-model": (
        lambda o: o["spec"].update(model={"uri": "pvc://models/rm"}, cache={"modelSize": "8Gi", "nodeGroups": ["gpu"]}),
        "cache needs a model.uri KServe can download into a node's volume (hf://, s3://, gs://, https://, http://)",
    ),
    "cache-of-an-oci-model": (
        lambda o: o["spec"].update(
            model={"uri": "oci://registry/rm:1"}, cache={"modelSize": "8Gi", "nodeGroups": ["gpu"]}
        ),
        "an oci:// model is mounted as a modelcar",
    ),
    "cache-with-a-token-but-no-downloader": (
        lambda o: o["spec"].update(
            credentials={"huggingFaceToken": {"name": "hf-token"}}, cache={"modelSize": "8Gi", "nodeGroups": ["gpu"]}
        ),
        "cache with credentials.huggingFaceToken needs cache.serviceAccountName",
    ),
    "cache-on-another-group-than-the-node-selector": (
        lambda o: o["spec"].update(
            nodeSelector={"serving.kserve.io/nodegroup": "cpu"}, cache={"modelSize": "8Gi", "nodeGroups": ["gpu"]}
        ),
        "nodeSelector['serving.kserve.io/nodegroup'] must name cache.nodeGroups[0]",
    ),
    "cache-without-node-groups": (
        _set("spec.cache", {"modelSize": "8Gi", "nodeGroups": []}),
        "spec.cache.nodeGroups: Invalid value",
    ),
    "cache-without-size": (_set("spec.cache", {"nodeGroups": ["gpu"]}), "spec.cache.modelSize: Required value"),
    "cache-unknown-scope": (
        _set("spec.cache", {"scope": "Node", "modelSize": "8Gi", "nodeGroups": ["gpu"]}),
        'Unsupported value: "Node"',
    ),
    "selector-in-without-values": (
        _set("spec.gateway", {"allowedClients": [{"podSelector": {"matchExpressions": IN_WITHOUT_VALUES}}]}),
        "operators In and NotIn need values",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_spec_is_rejected_with_a_clear_message(cluster, namespace, case):
    change, expected = INVALID[case]
    manifest = with_changes(change)
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False)
    assert result.returncode != 0, f"{case} was accepted"
    assert expected in result.stderr, result.stderr


@pytest.mark.parametrize("case", sorted(judge_cases.REFUSED))
def test_a_judge_that_cannot_work_is_rejected_with_what_to_fix(cluster, namespace, case):
    change, expected = judge_cases.REFUSED[case]
    manifest = judge_cases.changed(change)
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False)
    assert result.returncode != 0, f"{case} was accepted"
    assert expected in result.stderr, result.stderr


def test_a_judge_the_gateway_can_run_is_accepted(cluster, namespace):
    for case, change in sorted(judge_cases.ADMITTED.items()):
        manifest = judge_cases.changed(change)
        result = cluster.kubectl(
            "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False
        )
        assert result.returncode == 0, f"{case}: {result.stderr}"


def test_deployment_mode_is_immutable(cluster, namespace):
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(base()))
    changed = with_changes(_set("spec.serving.mode", "Knative"))
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(changed), check=False)
    assert result.returncode != 0
    assert "serving.mode is immutable" in result.stderr


def test_defaults_are_applied_by_the_api_server(cluster, namespace):
    minimal = {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": "minimal"},
        "spec": {"model": {"uri": "hf://org/rm"}},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(minimal))
    stored = json.loads(cluster.kubectl("get", "rewardmodel", "minimal", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["model"]["kind"] == "sequence"
    assert "runtime" not in stored["spec"]  # the operator picks it by resources.gpus (render/runtime.py)
    assert stored["spec"]["serving"] == {"mode": "Standard", "minReplicas": 1, "maxReplicas": 1}
    assert stored["spec"]["resources"] == {"gpus": 1}


@pytest.mark.parametrize("labels", [None, [0, 1]])
def test_a_process_model_with_its_step_tag_is_accepted(cluster, namespace, labels):
    """The positive side of the process rules: stepTagId set, the head's labels [0, 1] or unset, on the
    model and on a candidate."""
    model = {"kind": "process", "stepTagId": 151651, **({"returnedTokenIds": labels} if labels else {})}
    manifest = with_changes(
        lambda o: (
            o["spec"]["model"].update(model),
            o["spec"].update(
                canary={"model": {"uri": "hf://org/prm-v2", **({"returnedTokenIds": labels} if labels else {})}}
            ),
        )
    )
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def test_scale_to_zero_in_standard_mode_is_accepted(cluster, namespace):
    """minReplicas 0 in Standard mode (KEDA, fed by the gateway), with the gateway's load as target and no
    CPU request even though maxReplicas is above minReplicas: KEDA scales on the gateway's count, not CPU."""
    manifest = with_changes(
        lambda o: (
            o["spec"]["resources"].pop("cpu", None),
            o["spec"].update(
                serving={"minReplicas": 0, "maxReplicas": 4, "targetConcurrency": 16, "scaleDownDelay": "10m"}
            ),
        )
    )
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    # the same without a gateway, or above zero without a CPU request, is refused (the rules above)
    manifest["spec"]["serving"] = {"minReplicas": 1, "maxReplicas": 4}
    result = cluster.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False
    )
    assert result.returncode != 0 and "resources.cpu is needed" in result.stderr, result.stderr


def test_load_scaling_settings_are_accepted_where_an_autoscaler_honours_them(cluster, namespace):
    """The positive side of the rules above: KEDA on a concurrency target above zero without a CPU
    request, with a scale-down delay; Knative's initial scale, window and delay at their bounds."""
    keda = with_changes(
        lambda o: (
            o["spec"]["resources"].pop("cpu", None),
            o["spec"].update(
                serving={"minReplicas": 1, "maxReplicas": 4, "targetConcurrency": 32, "scaleDownDelay": "2m"}
            ),
        )
    )
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(keda))
    keda["spec"]["canary"] = {"model": {"uri": "hf://org/rm-v2"}}  # one candidate replica, as KServe makes it
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(keda))
    for serving in (
        {"minReplicas": 0, "maxReplicas": 4, "initialScale": 0, "scalingWindow": "6s", "scaleDownDelay": "1h"},
        {"minReplicas": 1, "maxReplicas": 4, "initialScale": 4, "scalingWindow": "1h", "scaleDownDelay": "0.5m"},
        {"minReplicas": 2, "maxReplicas": 2, "targetConcurrency": 8, "scalingWindow": "1m30s"},
    ):
        knative = with_changes(_set("spec.serving", {"mode": "Knative", **serving}))
        knative["metadata"]["name"] = "skywork-rm-knative"
        result = cluster.kubectl(
            "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(knative), check=False
        )
        assert result.returncode == 0, f"{serving}: {result.stderr}"


def test_a_gateway_scheduling_is_accepted(cluster, namespace):
    """The positive side of the scheduling rules: weights with coalescing left unset, and every field at once."""
    for scheduling in (
        {"clients": [{"name": "grpo-main", "weight": 3}, {"name": "ppo-ablation", "weight": 0.5}]},
        {
            "coalesce": True,
            "maxWaitMilliseconds": 0,
            "maxItemsPerCall": 65536,
            "maxCallsInFlight": 4096,
            "maxCallMilliseconds": 60000,
            "fairShare": True,
            "defaultClientWeight": 1000,
        },
        {"coalesce": False, "fairShare": False},
    ):
        manifest = with_changes(_set("spec.gateway", {"scheduling": scheduling}))
        result = cluster.kubectl(
            "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False
        )
        assert result.returncode == 0, f"{scheduling}: {result.stderr}"


def test_every_sample_is_accepted(cluster, namespace):
    for sample in sorted((REPO / "manifests" / "samples").glob("rewardmodel-*.yaml")):
        cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(sample))


def test_kubectl_get_shows_the_columns(cluster, namespace):
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(base()))
    header = cluster.kubectl("get", "rewardmodels", "-n", namespace, "-o", "wide").stdout.splitlines()[0].split()
    assert header == [
        "NAME",
        "READY",
        "MODE",
        "REPLICAS",
        "ASLEEP",
        "URL",
        "CANARY",
        "AGE",
        "REASON",
        "MESSAGE",
        "AGREEMENT",
    ]
    short = cluster.kubectl("get", "rwm", "-n", namespace).stdout
    assert "skywork-rm" in short and "Standard" in short
    assert "skywork-rm" in cluster.kubectl("get", "rlhf", "-n", namespace).stdout


def test_a_canary_is_defaulted_and_a_valid_one_accepted(cluster, namespace):
    manifest = with_changes(
        _set("spec.canary", {"model": {"uri": "hf://org/rm-v2"}, "mode": "split", "steps": [10, 25, 50, 100]})
    )
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    stored = json.loads(cluster.kubectl("get", "rewardmodel", "skywork-rm", "-n", namespace, "-o", "json").stdout)
    canary = stored["spec"]["canary"]
    assert (canary["interval"], canary["sticky"], canary["replicas"]) == ("10m", "group", 1)
    assert (canary["minAgreement"], canary["maxErrorRatio"], canary["attempt"]) == (0.8, 0.05, 1)
    assert "kind" not in canary["model"], "the candidate's kind is always the stable model's"
    # Knative mode, scaled to zero: the candidate's replicas are its own minimum, not bounded by the stable's
    knative = with_changes(
        lambda o: o["spec"].update(
            serving={"mode": "Knative", "minReplicas": 0, "maxReplicas": 2},
            canary={"model": {"uri": "hf://org/rm-v2"}, "mode": "split", "percent": 20},
        )
    )
    knative["metadata"]["name"] = "skywork-rm-knative"  # serving.mode is immutable on the first one
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(knative))


def test_kubectl_explain_teaches_the_api(cluster):
    explained = cluster.kubectl("explain", "rewardmodel.spec.model").stdout
    assert "The reward model to serve" in explained
    assert "kind" in explained and "token reward model" in explained
    assert "hf://org/model" in cluster.kubectl("explain", "rewardmodel.spec.model.uri").stdout


def test_every_rendered_inference_service_passes_kserves_schema_and_webhooks(cluster, namespace):
    """Server dry-runs go through KServe's defaulting and validating webhooks too (Knative
    renderings included: KServe validates them though Knative itself does not run here)."""
    inputs = sorted((GOLDEN / "inputs").glob("*.yaml")) + sorted((REPO / "manifests" / "samples").glob("rewardmodel-*"))
    assert len(inputs) >= 6
    # KEDA's ScaledObject is judged where KEDA runs (test_keda.py); this cluster may not serve its kind
    keda = cluster.kubectl("get", "crd/scaledobjects.keda.sh", check=False).returncode == 0
    for path in inputs:
        case = path.name
        reward_model = yaml.safe_load(path.read_text())
        # as stored by the API server: owner references need the owner's uid
        reward_model["metadata"].setdefault("uid", "00000000-0000-4000-8000-000000000000")
        reward_model["metadata"]["namespace"] = namespace
        for child in render_reward_model(reward_model):
            if child["kind"] == "ScaledObject" and not keda:
                continue
            result = cluster.kubectl(
                "apply",
                "--server-side",
                "--dry-run=server",
                "--field-manager=reward-operator",
                "-f",
                "-",
                input=yaml.safe_dump(child),
                check=False,
            )
            assert result.returncode == 0, f"{case}: {result.stderr}"


def test_kserves_webhook_validates_knative_renderings(cluster, namespace):
    """The negative control for the dry-runs above: KServe's own validating webhook, not just the
    schema, judges a Knative rendering (it refuses deploymentStrategy, which Knative cannot honour)."""
    webhook = "validatingwebhookconfiguration/inferenceservice.serving.kserve.io"
    if cluster.kubectl("get", webhook, check=False).returncode != 0:
        pytest.skip("KServe's webhooks are not installed on this cluster")
    reward_model = yaml.safe_load((GOLDEN / "inputs" / "token-knative.yaml").read_text())
    reward_model["metadata"].update(namespace=namespace, uid="00000000-0000-4000-8000-000000000000")
    (isvc,) = [child for child in render_reward_model(reward_model) if child["kind"] == "InferenceService"]
    isvc["spec"]["predictor"]["deploymentStrategy"] = {"type": "Recreate"}
    result = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=reward-operator", "-f", "-",
        input=yaml.safe_dump(isvc), check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "admission webhook" in result.stderr and "inferenceservice" in result.stderr, result.stderr
