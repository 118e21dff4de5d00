"""Golden files of an RLHFPipeline's children (a minimal and a full pipeline), and the graph's shape.

Regenerate after an intended change with UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import pytest
import yaml

from reward_operator.api import kserve
from reward_operator.render import render_rlhf_pipeline
from reward_operator.render.inferencegraph import ROUTER_MARGIN_SECONDS
from reward_testing.paths import GOLDEN, assert_matches_golden

PIPELINE_GOLDEN = GOLDEN / "pipeline"
CASES = {path.stem: yaml.safe_load(path.read_text()) for path in sorted((PIPELINE_GOLDEN / "inputs").glob("*.yaml"))}


def by_kind(children: list[dict], kind: str) -> list[dict]:
    return [c for c in children if c["kind"] == kind]


def graph_of(pipeline: dict) -> dict:
    (graph,) = by_kind(render_rlhf_pipeline(pipeline), kserve.INFERENCE_GRAPH_KIND)
    return graph


def test_a_minimal_and_a_full_case():
    assert {"minimal", "full"} <= set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_children_match_golden(case: str):
    assert_matches_golden(PIPELINE_GOLDEN / f"{case}.yaml", render_rlhf_pipeline(CASES[case]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_child_is_owned_in_standard_mode(case: str):
    pipeline = CASES[case]
    for child in render_rlhf_pipeline(pipeline):
        metadata = child["metadata"]
        assert metadata["annotations"][kserve.DEPLOYMENT_MODE] == "Standard"
        assert metadata["labels"]["serving.rlhf.dev/rlhfpipeline"] == pipeline["metadata"]["name"]
        (owner,) = metadata["ownerReferences"]
        assert owner["kind"] == "RLHFPipeline" and owner["uid"] == pipeline["metadata"]["uid"]


def test_roles_run_on_their_runtimes():
    isvcs = {c["metadata"]["name"]: c for c in by_kind(render_rlhf_pipeline(CASES["full"]), "InferenceService")}
    assert list(isvcs) == ["ppo-full-actor", "ppo-full-reference", "ppo-full-critic"]
    runtime = {name: isvc["spec"]["predictor"]["model"]["runtime"] for name, isvc in isvcs.items()}
    assert runtime == {"ppo-full-actor": "vllm-generate", "ppo-full-reference": "vllm-generate",
                       "ppo-full-critic": "vllm-reward"}  # fmt: skip
    critic_args = isvcs["ppo-full-critic"]["spec"]["predictor"]["model"]["args"]
    assert "--runner=pooling" in critic_args and any('"pooling_type":"ALL"' in a for a in critic_args)


def test_the_reference_defaults_to_the_actors_base_model():
    children = render_rlhf_pipeline(CASES["minimal"])
    actor, reference = by_kind(children, "InferenceService")
    assert reference["spec"]["predictor"]["model"]["storageUri"] == actor["spec"]["predictor"]["model"]["storageUri"]
    assert "--served-model-name=ppo-reference" in reference["spec"]["predictor"]["model"]["args"]
    assert len(by_kind(children, "InferenceService")) == 2, "no critic without spec.critic"


def test_the_router_waits_on_each_step_as_long_as_a_batch_of_generations_may_take():
    timeouts = graph_of(CASES["minimal"])["spec"]["routerTimeouts"]
    assert (timeouts["serviceClient"], timeouts["serverRead"]) == (600, 600)


@pytest.mark.parametrize(
    ("flows", "in_turn"),
    [({"score": {}}, 2), ({"score": {}, "generateAndScore": {}}, 3), ({"bestOfN": {}}, 3)],
)
def test_the_router_writes_its_answer_after_the_longest_flows_steps_one_after_another(flows, in_turn):
    """Go's WriteTimeout counts from the request's arrival, and a handler that outlasts it has its answer
    dropped: measured with the pinned router, a two-step Sequence of 3 s steps under serverWrite 4 s and a
    step timed out at serviceClient = serverWrite both left the client with a closed connection and no
    answer. The write timeout outlasts every step of the longest flow waited on in turn (score: the
    parts' Ensemble, then combine; generate-and-score: generate, then score's two; best-of-n: candidates,
    parts, select), so a slow flow is answered and a step's timeout is the router's 500."""
    pipeline = {**CASES["minimal"], "spec": {**CASES["minimal"]["spec"], "flows": flows}}
    timeouts = graph_of(pipeline)["spec"]["routerTimeouts"]
    step = timeouts["serviceClient"]
    assert timeouts["serverWrite"] == in_turn * step + ROUTER_MARGIN_SECONDS
    assert timeouts["serverWrite"] - in_turn * step >= 10  # the router's own work, and writing its error


def test_every_step_calls_a_gateway_never_a_predictor():
    """vLLM serves no v1 predict path, so no step names a service; every URL is a transformer's."""
    for node in graph_of(CASES["full"])["spec"]["nodes"].values():
        for step in node["steps"]:
            assert "serviceName" not in step
            if "serviceUrl" in step:
                assert "-transformer.rlhf.svc.cluster.local/v1/pipeline/" in step["serviceUrl"]


def test_sequences_pass_the_previous_answer_only_where_a_step_reads_it():
    nodes = graph_of(CASES["full"])["spec"]["nodes"]
    data = {(name, step["name"]): step.get("data") for name, node in nodes.items() for step in node["steps"]}
    assert data[("score", "parts")] is None  # the request itself
    assert data[("score", "combine")] == "$response"
    assert data[("generate-and-score", "score")] == "$response"
    assert data[("best-of-n", "parts")] == "$response" and data[("best-of-n", "select")] == "$response"


def test_the_switch_takes_best_of_n_before_score_before_generate():
    root = graph_of(CASES["full"])["spec"]["nodes"]["root"]
    assert root["routerType"] == "Switch"
    assert [(s["nodeName"], s["condition"]) for s in root["steps"]] == [
        ("best-of-n", "best_of_n"),
        ("score", "responses"),
        ("generate-and-score", "prompts"),
    ]


def test_only_the_flows_asked_for_are_routed():
    pipeline = {**CASES["minimal"], "spec": {**CASES["minimal"]["spec"], "flows": {"bestOfN": {}}}}
    nodes = graph_of(pipeline)["spec"]["nodes"]
    assert set(nodes) == {"root", "best-of-n", "best-of-n-parts"}
    (actor,) = [c for c in render_rlhf_pipeline(pipeline) if c["metadata"]["name"] == "ppo-actor"]
    env = {e["name"]: e.get("value") for e in actor["spec"]["transformer"]["containers"][0]["env"]}
    assert env["REWARD_GATEWAY_PIPELINE_BEST_OF_N"] == "4"


def test_the_graph_is_left_out_while_held():
    children = render_rlhf_pipeline(CASES["minimal"], with_graph=False)
    assert not by_kind(children, kserve.INFERENCE_GRAPH_KIND)
