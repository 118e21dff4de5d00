"""An RLHFPipeline's policy over plain dicts: the first gap in what its roles name, each role's condition, the
reward models it names, the graph, and Ready."""

from __future__ import annotations

import pytest

from reward_operator.api import conditions
from reward_operator.policy.dependencies import Observed, References, SecretReference
from reward_operator.policy.pipeline import (
    ROLE_CONDITIONS,
    graph_ready,
    invalid_spec,
    pipeline_ready,
    rewards_ready,
    role_ready,
    status_fields,
    unusable_rewards,
)
from reward_operator.policy.pipeline import roles as policy_roles
from reward_operator.policy.status import Condition


def with_ready(status: str | None, reason: str = "", message: str = "", **spec) -> dict:
    body: dict = {"metadata": {"name": "x"}, "spec": spec, "status": {}}
    if status is not None:
        body["status"]["conditions"] = [{"type": "Ready", "status": status, "reason": reason, "message": message}]
    return body


def test_a_role_is_judged_as_a_reward_models_inference_service_is():
    isvc = {
        "metadata": {"name": "ppo-actor"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PredictorReady", "status": "True"},
                {"type": "TransformerReady", "status": "True"},
            ]
        },
    }
    assert role_ready(conditions.ACTOR_READY, isvc) == Condition(
        conditions.ACTOR_READY, "True", conditions.INFERENCE_SERVICE_READY, "InferenceService ppo-actor is Ready"
    )
    waiting = role_ready(conditions.CRITIC_READY, None)
    assert (waiting.type, waiting.status, waiting.reason) == (
        conditions.CRITIC_READY,
        "False",
        conditions.AWAITING_KSERVE,
    )


def test_a_missing_reward_model_is_named_with_its_index_and_what_to_do():
    found = {"helpful": with_ready("True"), "harmless": None}
    condition = rewards_ready("rlhf", found)
    assert (condition.status, condition.reason) == ("False", conditions.REWARD_MODEL_NOT_FOUND)
    assert "spec.rewards[1]: RewardModel harmless not found in namespace rlhf" in condition.message
    assert unusable_rewards("rlhf", found) == condition


def test_a_reward_model_without_its_gateway_cannot_be_called():
    condition = rewards_ready("rlhf", {"helpful": with_ready("True", gateway={"enabled": False})})
    assert (condition.status, condition.reason) == ("False", conditions.REWARD_MODEL_WITHOUT_GATEWAY)
    assert "gateway.enabled: false" in condition.message


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ({"a": with_ready("True"), "b": with_ready("True")}, ("True", conditions.REWARD_MODELS_READY)),
        ({"a": with_ready(None), "b": with_ready("True")}, ("Unknown", conditions.REWARD_MODEL_NOT_READY)),
        (
            {"a": with_ready("Unknown", "AwaitingKServe"), "b": with_ready("False", "ModelLoadFailed", "exit 1")},
            ("False", conditions.REWARD_MODEL_NOT_READY),
        ),
    ],
    ids=["all Ready", "one without a status yet", "a failure outranks a wait"],
)
def test_rewards_ready_from_each_reward_models_ready(found, expected):
    condition = rewards_ready("rlhf", found)
    assert (condition.status, condition.reason) == expected
    if expected[0] == "False":
        assert condition.message == "RewardModel b is not Ready (ModelLoadFailed: exit 1)"


def graph(*conditions_) -> dict:
    return {"metadata": {"name": "ppo"}, "status": {"conditions": [dict(c) for c in conditions_]}}


@pytest.mark.parametrize(
    ("stored", "held", "expected"),
    [
        (None, True, ("Unknown", conditions.AWAITING_REWARD_MODELS)),
        (None, False, ("False", conditions.AWAITING_KSERVE)),
        ({"metadata": {"name": "ppo"}}, False, ("Unknown", conditions.AWAITING_KSERVE)),
        (graph({"type": "Ready", "status": "True"}), False, ("True", conditions.GRAPH_SERVING)),
        (graph({"type": "Ready", "status": "False"}), False, ("False", conditions.GRAPH_NOT_READY)),
        (
            graph({"type": "Ready", "status": "False", "reason": "RouterDeploymentFailed"}),
            False,
            ("False", "RouterDeploymentFailed"),
        ),
    ],
    ids=["held", "not created", "no report yet", "Ready", "not Ready", "KServe's reason"],
)
def test_graph_ready(stored, held, expected):
    condition = graph_ready(stored, held)
    assert (condition.type, condition.status, condition.reason) == (conditions.GRAPH_READY, *expected)


def role(condition_type: str, status: str, reason: str = "R", message: str = "m") -> Condition:
    return Condition(condition_type, status, reason, message)


def test_ready_when_every_role_is():
    roles = [role(t, "True") for t in (conditions.ACTOR_READY, conditions.REWARDS_READY, conditions.GRAPH_READY)]
    assert pipeline_ready(roles) == Condition(conditions.READY, "True", conditions.ROLES_READY, "every role is Ready")


def test_a_failing_role_speaks_for_ready_before_a_waiting_one():
    roles = [
        role(conditions.ACTOR_READY, "Unknown", conditions.AWAITING_KSERVE, "waiting"),
        role(conditions.REWARDS_READY, "False", conditions.REWARD_MODEL_NOT_FOUND, "spec.rewards[0]: ..."),
        role(conditions.GRAPH_READY, "Unknown", conditions.AWAITING_REWARD_MODELS, "held"),
    ]
    assert pipeline_ready(roles) == Condition(
        conditions.READY, "False", conditions.REWARD_MODEL_NOT_FOUND, "rewards: spec.rewards[0]: ..."
    )


def test_a_missing_reward_model_speaks_for_ready_before_a_role_kserve_reports_failing():
    # KServe's False for a role may pass (seen: "Predictor ingress not created" for a moment); the user's
    # gap stays until they act, so Ready keeps its reason and its event is posted once
    roles = [
        role(conditions.ACTOR_READY, "False", "Predictor ingress not created", "x"),
        role(conditions.REWARDS_READY, "False", conditions.REWARD_MODEL_NOT_FOUND, "spec.rewards[1]: ..."),
    ]
    assert pipeline_ready(roles) == Condition(
        conditions.READY, "False", conditions.REWARD_MODEL_NOT_FOUND, "rewards: spec.rewards[1]: ..."
    )
    roles[1] = role(conditions.REWARDS_READY, "True")
    assert pipeline_ready(roles).reason == "Predictor ingress not created"


def test_the_first_waiting_role_speaks_when_none_fails():
    roles = [role(conditions.ACTOR_READY, "True"), role(conditions.CRITIC_READY, "Unknown", "PredictorReady", "x")]
    assert pipeline_ready(roles) == Condition(conditions.READY, "Unknown", "PredictorReady", "critic: x")


def test_status_fields_carry_the_url_only_once_the_graph_is_applied():
    services = {"actor": "ppo-actor", "reference": "ppo-reference"}
    assert status_fields(None, None, services) == {"inferenceServices": services}
    assert status_fields("http://ppo.rlhf.svc.cluster.local", "ppo", services) == {
        "inferenceServices": services,
        "inferenceGraph": "ppo",
        "url": "http://ppo.rlhf.svc.cluster.local",
    }


def references(runtime: str, prefix: str, secret: str | None = None) -> References:
    secrets = (SecretReference(f"{prefix}.credentials.huggingFaceToken", secret, "HF_TOKEN"),) if secret else ()
    return References(runtime, secrets, None, prefix=prefix, runtime_named=False)


def pipeline(name: str = "ppo", namespace: str = "rlhf", critic: bool = True) -> dict:
    spec = {"actor": {}, "rewards": [], **({"critic": {}} if critic else {})}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


WANTED = {
    "actor": references("vllm-generate", "spec.actor", "hf-token"),
    "reference": references("vllm-generate", "spec.reference", "hf-token"),
    "critic": references("vllm-reward", "spec.critic"),
}


@pytest.mark.parametrize(
    ("body", "runtimes", "secrets", "gap", "asked"),
    [
        (pipeline(), {"vllm-generate", "vllm-reward"}, {"HF_TOKEN"}, None, ["actor", "reference", "critic"]),
        # the first gap, role by role; the later roles are not asked about
        (pipeline(), {"vllm-reward"}, {"HF_TOKEN"}, "spec.actor.runtime: no ClusterServingRuntime", ["actor"]),
        (pipeline(), {"vllm-generate"}, {"HF_TOKEN"}, "spec.critic.runtime: no ClusterServingRuntime",
         ["actor", "reference", "critic"]),
        (pipeline(), {"vllm-generate", "vllm-reward"}, None, "spec.actor.credentials.huggingFaceToken", ["actor"]),
        # a host name KServe cannot derive is found before anything is asked of the cluster
        (pipeline(namespace="a-namespace-with-a-rather-long-name-here", critic=False), set(), None,
         "ppo-reference-transformer", []),
    ],
    ids=["every role served", "the actor's runtime", "the critic's runtime", "a Secret", "a host name"],
)  # fmt: skip
def test_the_first_gap_a_pipeline_names_is_its_invalid_spec(body, runtimes, secrets, gap, asked):
    roles = {role: WANTED[role] for role in (policy_roles(body["spec"]))}
    looked_up = []

    def lookup(wanted: References) -> Observed:
        looked_up.append(wanted.prefix.removeprefix("spec."))
        keys = {ref.secret: secrets for ref in wanted.secrets}
        return Observed(runtime_found=wanted.runtime in runtimes, secret_keys=keys)

    problem = invalid_spec(body, roles, lookup)
    assert (problem is None) if gap is None else ((problem is not None and problem.startswith(gap)) or gap in problem)
    if asked is not None:
        assert looked_up == asked


def test_the_roles_and_their_conditions():
    assert policy_roles({"actor": {}}) == ["actor", "reference"]
    assert policy_roles({"actor": {}, "critic": {}}) == ["actor", "reference", "critic"]
    assert [ROLE_CONDITIONS[role] for role in policy_roles({"critic": {}})] == [
        conditions.ACTOR_READY,
        conditions.REFERENCE_READY,
        conditions.CRITIC_READY,
    ]
