"""The RLHFPipeline roles' routes (reward_gateway.pipeline.routes) over real HTTP against the fake vLLM.

Each route is called as KServe's InferenceGraph router calls it (a JSON object in, a
JSON object out); the expected figures come from the fake's own functions.
"""

from __future__ import annotations

import json
import statistics

import pytest

from reward_testing.fake_vllm import completion_text, conversation_text, logit, text_tokens, token_logprob

REWARDS = [
    {"step": "reward-helpful", "weight": 0.7, "normalise": "none"},
    {"step": "reward-harmless", "weight": 0.3, "normalise": "running"},
]
ITEMS = {"prompts": ["Say hi to", "Count to"], "responses": [" the whole world", " three"]}


@pytest.fixture
def actor(start_gateway):
    def start(**overrides: str):
        settings = {"pipeline_role": "actor", "model_name": "policy", "pipeline_rewards": json.dumps(REWARDS)}
        return start_gateway(**{**settings, **overrides})

    return start


def parts_body(items: dict, helpful: list, harmless: list, **steps) -> dict:
    """An Ensemble's answer, as KServe's router hands the score-parts node's to /combine."""
    return {"input": items, "reward-helpful": {"rewards": helpful}, "reward-harmless": {"rewards": harmless}, **steps}


# actor: input


def test_input_answers_the_score_request_back(actor, backend):
    gateway = actor()
    answer = gateway.post("/v1/pipeline/input", json=ITEMS)
    assert answer.status_code == 200, answer.text
    assert answer.json() == ITEMS
    grouped = {**ITEMS, "groups": [0, 0]}
    assert gateway.post("/v1/pipeline/input", json=grouped).json() == grouped
    assert backend.calls == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompts": ["a"], "responses": []}, "responses has 0 entries but prompts has 1"),
        ({"prompts": [], "responses": []}, "prompts must not be empty"),
        ({"prompts": ["a"], "responses": [3]}, "responses.0"),
        ({"prompts": ["a"]}, "responses: Field required"),
        ({"prompts": ["a"], "responses": ["b"], "groups": [0, 1]}, "groups has 2 entries"),
        ({"prompts": ["a"], "responses": ["b"], "groups": ["x"]}, "groups.0"),
        ({"prompts": ["a"], "responses": ["b"], "labels": []}, "labels: unknown field"),
        ({"prompts": ["a"] * 4, "responses": ["b"] * 4}, "at most 3"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_input_refuses_a_malformed_score_request_with_400(actor, backend, body, message):
    answer = actor(max_items="3").post("/v1/pipeline/input", json=body)
    assert answer.status_code == 400
    assert message in answer.json()["error"]


# actor: generate and candidates


def test_generate_answers_a_score_request_in_prompt_order(actor, backend):
    backend.choice_order = "reversed"  # the order comes from the choices' indices
    gateway = actor()
    prompts = [f"prompt {i}" for i in range(5)]
    sampling = {"max_tokens": 2, "temperature": 1, "top_p": 0.9, "seed": 7}
    answer = gateway.post("/v1/pipeline/generate", json={"prompts": prompts, **sampling})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"prompts": prompts, "responses": [completion_text(p, 0, 2) for p in prompts]}
    assert backend.calls == [("/v1/completions", {"model": "policy", "prompt": prompts, "n": 1, **sampling})]


def test_generate_without_sampling_settings_leaves_them_to_vllm(actor, backend):
    answer = actor().post("/v1/pipeline/generate", json={"prompts": ["p"]})
    assert answer.json()["responses"] == [completion_text("p", 0)]
    assert backend.calls[0][1] == {"model": "policy", "prompt": ["p"], "n": 1}


def test_candidates_are_n_per_prompt_grouped_by_prompt(actor, backend):
    backend.choice_order = "reversed"
    gateway = actor(pipeline_best_of_n="3")
    answer = gateway.post("/v1/pipeline/candidates", json={"best_of_n": True, "prompts": ["a b", "c"], "seed": 1})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "prompts": ["a b"] * 3 + ["c"] * 3,
        "responses": [completion_text(p, j) for p in ("a b", "c") for j in range(3)],
        "groups": [0, 0, 0, 1, 1, 1],
    }
    assert backend.calls == [("/v1/completions", {"model": "policy", "prompt": ["a b", "c"], "n": 3, "seed": 1})]
    # The candidates are what the best-of-n Ensemble's input step takes.
    assert gateway.post("/v1/pipeline/input", json=answer.json()).json() == answer.json()


@pytest.mark.parametrize(
    ("route", "body", "status", "message"),
    [
        ("candidates", {"best_of_n": True, "prompts": ["a"]}, 404, "PIPELINE_BEST_OF_N"),
        ("generate", {"best_of_n": True, "prompts": ["a"]}, 400, "/v1/pipeline/candidates"),
        ("generate", {"prompts": ["a"], "max_tokens": 0}, 400, "max_tokens"),
        ("generate", {"prompts": ["a"], "top_p": 1.5}, 400, "top_p"),
        ("generate", {"prompts": ["a"], "n": 2}, 400, "n: unknown field"),
        ("generate", {"prompts": []}, 400, "prompts must not be empty"),
    ],
)
def test_generation_requests_are_checked_before_vllm_is_called(actor, backend, route, body, status, message):
    answer = actor().post(f"/v1/pipeline/{route}", json=body)
    assert answer.status_code == status
    assert message in answer.json()["error"]
    assert backend.calls == []


def test_candidates_refuse_best_of_n_false(actor, backend):
    answer = actor(pipeline_best_of_n="2").post("/v1/pipeline/candidates", json={"best_of_n": False, "prompts": ["a"]})
    assert answer.status_code == 400
    assert "best_of_n is false" in answer.json()["error"]


# actor: combine


def test_combine_weights_raw_parts_and_passes_values_and_logprobs(actor, backend):
    gateway = actor(pipeline_rewards=json.dumps([{**r, "normalise": "none"} for r in REWARDS]))
    body = parts_body(
        ITEMS,
        [1.0, -2.0],
        [4, 0.5],
        critic={"values": [[0.1, 0.2, 0.3], [0.4]]},
        reference={"logprobs": [[-1], [-2.5]]},
    )
    answer = gateway.post("/v1/pipeline/combine", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        **ITEMS,
        "rewards": pytest.approx([0.7 * 1.0 + 0.3 * 4, 0.7 * -2.0 + 0.3 * 0.5]),
        "parts": {"helpful": [1.0, -2.0], "harmless": [4.0, 0.5]},
        "values": [[0.1, 0.2, 0.3], [0.4]],
        "logprobs": [[-1.0], [-2.5]],
    }
    assert backend.calls == []


def test_running_normalisation_standardises_with_every_reward_seen_so_far(actor, backend):
    gateway = actor()
    seen: list[float] = []
    batches = [[3.0], [1.0, 2.0, 6.0], [10.0, -4.0]]
    for harmless in batches:
        items = {"prompts": ["p"] * len(harmless), "responses": ["r"] * len(harmless)}
        helpful = [1.0] * len(harmless)
        body = parts_body(items, helpful, harmless, reference={"logprobs": [[]] * len(harmless)})
        answer = gateway.post("/v1/pipeline/combine", json=body)
        assert answer.status_code == 200, answer.text
        # Updated with the batch first, then standardised (population deviation); the first
        # batch of one has no deviation: centred only, never divided by zero.
        seen += harmless
        mean, std = statistics.fmean(seen), statistics.pstdev(seen)
        expected = [(value - mean) / (std if std > 0 else 1.0) for value in harmless]
        result = answer.json()
        assert result["normalised"] == {"harmless": pytest.approx(expected)}
        assert result["parts"] == {"helpful": helpful, "harmless": harmless}
        assert result["rewards"] == pytest.approx([0.7 * 1.0 + 0.3 * z for z in expected])
        assert "values" not in result  # no critic in the graph
    assert result["normalised"]["harmless"][0] == pytest.approx(
        (10.0 - statistics.fmean(seen)) / statistics.pstdev(seen)
    )


def test_running_statistics_are_kept_per_reward_model(actor, backend):
    rewards = [{"step": "reward-a", "weight": 1, "normalise": "running"}]
    rewards.append({"step": "reward-b", "weight": 1, "normalise": "running"})
    gateway = actor(pipeline_rewards=json.dumps(rewards))
    items = {"prompts": ["p", "q"], "responses": ["r", "s"]}
    body = {"input": items, "reward-a": {"rewards": [0, 2]}, "reward-b": {"rewards": [100, 300]}}
    answer = gateway.post("/v1/pipeline/combine", json={**body, "reference": {"logprobs": [[], []]}}).json()
    assert answer["normalised"] == {"a": [-1.0, 1.0], "b": [-1.0, 1.0]}
    assert answer["rewards"] == [-2.0, 2.0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b.pop("reward-harmless"), "step 'reward-harmless': its answer is missing"),
        (lambda b: b.update({"reward-helpful": {"rewards": [1.0]}}), "step 'reward-helpful': expected rewards"),
        (lambda b: b.update({"reward-helpful": {"rewards": [1.0, "x"]}}), "step 'reward-helpful': rewards holds"),
        (lambda b: b.update({"reward-helpful": {"rewards": [1.0, True]}}), "step 'reward-helpful': rewards holds"),
        (lambda b: b.update({"reward-helpful": {"error": "boom"}}), "step 'reward-helpful'"),
        (lambda b: b.pop("reference"), "step 'reference': its answer is missing"),
        (lambda b: b.update({"reference": {"logprobs": [[-1], ["a"]]}}), "step 'reference': logprobs holds"),
        (lambda b: b.update({"critic": {"values": [[0.1]]}}), "step 'critic': expected values"),
        (lambda b: b.update({"reward-other": {"rewards": [1, 2]}}), "step 'reward-other': not a step"),
        (lambda b: b.pop("input"), "step 'input': its answer is missing"),
        (lambda b: b.update({"input": {"prompts": ["a"]}}), "step 'input': responses"),
    ],
)
def test_combine_answers_502_naming_the_step_whose_part_is_wrong(actor, backend, change, message):
    body = parts_body(ITEMS, [1.0, 2.0], [3.0, 4.0], reference={"logprobs": [[-1], [-2]]})
    change(body)
    answer = actor().post("/v1/pipeline/combine", json=body)
    assert answer.status_code == 502, answer.text
    assert message in answer.json()["error"]


def test_a_combination_refused_leaves_the_running_statistics_alone(actor, backend):
    gateway = actor()
    bad = parts_body(ITEMS, [1.0, 2.0], [3.0, 4.0])  # no reference
    assert gateway.post("/v1/pipeline/combine", json=bad).status_code == 502
    good = parts_body({"prompts": ["p"], "responses": ["r"]}, [1.0], [5.0], reference={"logprobs": [[]]})
    assert gateway.post("/v1/pipeline/combine", json=good).json()["normalised"] == {"harmless": [0.0]}


# actor: select


def test_select_picks_each_prompts_best_candidate_by_combined_reward(actor, backend):
    gateway = actor(pipeline_rewards=json.dumps([{**r, "normalise": "none"} for r in REWARDS]))
    items = {
        "prompts": ["a", "a", "a", "b", "b"],
        "responses": ["a0", "a1", "a2", "b0", "b1"],
        "groups": [0, 0, 0, 1, 1],
    }
    # a: a1 best on helpful alone, but a2 wins combined; b: a tie goes to the first candidate.
    helpful = [0.0, 3.0, 2.0, 1.0, 1.0]
    harmless = [0.0, 0.0, 4.0, 2.0, 2.0]
    answer = gateway.post("/v1/pipeline/select", json=parts_body(items, helpful, harmless))
    assert answer.status_code == 200, answer.text
    combined = [0.7 * h + 0.3 * s for h, s in zip(helpful, harmless, strict=True)]
    results = answer.json()["results"]
    assert [result["prompt"] for result in results] == ["a", "b"]
    assert results[0]["best"] == {"response": "a2", "reward": pytest.approx(combined[2]), "index": 2}
    assert results[1]["best"] == {"response": "b0", "reward": pytest.approx(combined[3]), "index": 0}
    assert results[0]["candidates"] == [
        {
            "response": f"a{i}",
            "reward": pytest.approx(combined[i]),
            "parts": {"helpful": helpful[i], "harmless": harmless[i]},
        }
        for i in range(3)
    ]
    assert len(results[1]["candidates"]) == 2


def test_select_needs_the_candidates_groups(actor, backend):
    body = parts_body(ITEMS, [1.0, 2.0], [3.0, 4.0])
    answer = actor().post("/v1/pipeline/select", json=body)
    assert answer.status_code == 502
    assert "step 'input': no groups" in answer.json()["error"]
    body = parts_body({**ITEMS, "groups": [0, 0]}, [1.0, 2.0], [3.0, 4.0], reference={"logprobs": [[], []]})
    answer = actor().post("/v1/pipeline/select", json=body)
    assert answer.status_code == 502
    assert "step 'reference': not a step" in answer.json()["error"]


# reference


def test_logprobs_are_the_response_tokens_of_one_echoing_call(start_gateway, backend):
    gateway = start_gateway(pipeline_role="reference", model_name="ref")
    items = {"prompts": ["Say hi to", "Say hi to", "Count to"], "responses": [" the world", " you", " three four"]}
    answer = gateway.post("/v1/pipeline/logprobs", json=items)
    assert answer.status_code == 200, answer.text
    tokens = [text_tokens(response) for response in items["responses"]]
    assert answer.json() == {
        "logprobs": [pytest.approx([token_logprob(t) for t in row]) for row in tokens],
        "tokens": tokens,
    }
    completions = [body for path, body in backend.calls if path == "/v1/completions"]
    texts = [p + r for p, r in zip(items["prompts"], items["responses"], strict=True)]
    assert completions == [
        {"model": "ref", "prompt": texts, "max_tokens": 1, "echo": True, "logprobs": 0, "add_special_tokens": True}
    ]
    # The prompt's length in tokens, once per distinct prompt, with the BOS vLLM adds.
    tokenized = sorted(body["prompt"] for path, body in backend.calls if path == "/tokenize")
    assert tokenized == ["Count to", "Say hi to"]


def test_a_token_straddling_the_boundary_is_counted_with_the_prompt(start_gateway, backend):
    gateway = start_gateway(pipeline_role="reference")
    # "Say hi" + "gh there": " high" is one token, counted with the prompt.
    answer = gateway.post("/v1/pipeline/logprobs", json={"prompts": ["Say hi"], "responses": ["gh there"]})
    assert answer.json()["tokens"] == [[" there"]]


def test_logprobs_without_a_bos_or_a_prompt_cannot_give_the_first_token_one(start_gateway, backend):
    backend.bos_token = None
    gateway = start_gateway(pipeline_role="reference")
    answer = gateway.post("/v1/pipeline/logprobs", json={"prompts": ["p q"], "responses": [" r"]})
    assert answer.json()["tokens"] == [[" r"]]  # no BOS: counted all the same
    answer = gateway.post("/v1/pipeline/logprobs", json={"prompts": [""], "responses": ["r"]})
    assert answer.status_code == 400
    assert "prompts.0 is empty" in answer.json()["error"]


# critic


def test_values_are_the_response_tokens_values(start_gateway, backend):
    gateway = start_gateway(pipeline_role="critic", model_name="critic")
    answer = gateway.post("/v1/pipeline/values", json=ITEMS)
    assert answer.status_code == 200, answer.text
    expected = []
    for prompt, response in zip(ITEMS["prompts"], ITEMS["responses"], strict=True):
        words = (prompt + response).split(" ")
        # The fake's value of a token is its text so far; the prompt's words come first.
        expected.append([logit(" ".join(words[: i + 1])) for i in range(len(prompt.split()), len(words))])
    assert answer.json() == {"values": [pytest.approx(row) for row in expected]}
    pooling = [body for path, body in backend.calls if path == "/pooling"]
    assert pooling == [
        {
            "model": "critic",
            "input": [p + r for p, r in zip(ITEMS["prompts"], ITEMS["responses"], strict=True)],
            "add_special_tokens": True,
            "task": "token_classify",
            "use_activation": False,
        }
    ]


# upstream failures


@pytest.mark.parametrize(
    ("role", "route", "body"),
    [
        ("actor", "generate", {"prompts": ["a", "b"]}),
        ("reference", "logprobs", ITEMS),
        ("critic", "values", ITEMS),
    ],
)
@pytest.mark.parametrize(
    ("misbehaviour", "status", "message"),
    [
        ("429", 503, "overloaded"),
        ("cut", 502, "broken"),
        ("duplicate_index", 502, "index"),
        ("index_out_of_range", 502, "index"),
    ],
)
def test_vllm_failures_answer_like_the_scoring_routes(
    start_gateway, backend, role, route, body, misbehaviour, status, message
):
    rewards = {"pipeline_rewards": json.dumps(REWARDS)} if role == "actor" else {}
    gateway = start_gateway(pipeline_role=role, **rewards)
    backend.misbehaviour = misbehaviour
    answer = gateway.post(f"/v1/pipeline/{route}", json=body)
    assert answer.status_code == status, answer.text
    assert message in answer.json()["error"]


def test_vllm_too_slow_answers_504(actor, backend):
    gateway = actor(request_timeout_seconds="0.3")
    backend.misbehaviour = "hang"
    answer = gateway.post("/v1/pipeline/generate", json={"prompts": ["a"]})
    assert answer.status_code == 504
    assert "did not answer" in answer.json()["error"]


def test_vllm_away_answers_503_with_retry_after(actor, backend):
    backend.healthy = False
    answer = actor(scale_from_zero_timeout_seconds="0.2").post("/v1/pipeline/generate", json={"prompts": ["a"]})
    assert answer.status_code == 503
    assert "retry-after" in answer.headers


def test_vllm_refusing_the_input_is_the_clients_400(start_gateway, backend):
    gateway = start_gateway(pipeline_role="reference")
    answer = gateway.post("/v1/pipeline/logprobs", json={"prompts": ["p"], "responses": ["x" * 5000]})
    assert answer.status_code == 400
    assert "maximum context length" in answer.json()["error"]


# the role's route set


ACTOR_PATHS = {f"/v1/pipeline/{route}" for route in ("input", "generate", "candidates", "combine", "select")}


@pytest.mark.parametrize(
    ("role", "paths"),
    [("actor", ACTOR_PATHS), ("reference", {"/v1/pipeline/logprobs"}), ("critic", {"/v1/pipeline/values"})],
)
def test_a_role_serves_its_routes_and_the_probes_only(start_gateway, backend, role, paths):
    rewards = {"pipeline_rewards": json.dumps(REWARDS)} if role == "actor" else {}
    gateway = start_gateway(pipeline_role=role, model_name="m", **rewards)
    assert set(gateway.app.scoring_paths) == paths
    for path in ("/v1/rewards", "/get_reward", "/classify", "/v1/models/m:predict", "/v1/pipeline/reward"):
        assert gateway.post(path, json=ITEMS).status_code == 404, path
    assert gateway.get("/").status_code == 200
    assert gateway.get("/v1/models/m").json() == {"name": "m", "ready": True}
    assert gateway.get(sorted(paths)[0]).status_code == 405
    metrics = gateway.get("/metrics").text
    route = sorted(paths)[0].rsplit("/", 1)[1]
    assert f'reward_gateway_requests_total{{code="405",model="m",route="pipeline_{route}"}} 1.0' in metrics
    assert backend.calls == []


def test_pipeline_routes_are_counted_with_their_items(actor, backend):
    gateway = actor(model_name="policy")
    assert gateway.post("/v1/pipeline/input", json=ITEMS).status_code == 200
    metrics = gateway.get("/metrics").text
    assert 'reward_gateway_items_total{model="policy",result="ok",route="pipeline_input"} 2.0' in metrics
    assert gateway.gateway.load.items == 0 and gateway.gateway.load.requests == 0


def test_the_memory_charge_covers_the_role_routes(start_gateway, backend):
    # Each role's charge per byte: the front's 13, plus what vLLM's answers cost.
    assert start_gateway(pipeline_role="critic").app.cost_per_byte == 13 + 370
    assert start_gateway(pipeline_role="reference").app.cost_per_byte == 13 + 1100
    gateway = start_gateway(pipeline_role="critic", memory_limit_bytes=str(512 * 2**20))
    body = {"prompts": ["p" * 400_000], "responses": ["r" * 400_000]}  # 800 kB at 383 per byte: over 256 MiB
    answer = gateway.post("/v1/pipeline/values", json=body)
    assert answer.status_code == 413
    assert backend.calls == []


# a RewardModel's own pipeline route


def test_reward_route_scores_like_v1_rewards(start_gateway, backend):
    gateway = start_gateway()
    answer = gateway.post("/v1/pipeline/reward", json=ITEMS)
    assert answer.status_code == 200, answer.text
    expected = [
        logit(conversation_text([{"role": "user", "content": p}, {"role": "assistant", "content": r}]))
        for p, r in zip(ITEMS["prompts"], ITEMS["responses"], strict=True)
    ]
    assert answer.json() == {"rewards": pytest.approx(expected)}
    items = [{"prompt": p, "response": r} for p, r in zip(ITEMS["prompts"], ITEMS["responses"], strict=True)]
    calls = list(backend.calls)
    backend.calls.clear()
    assert gateway.post("/v1/rewards", json={"items": items}).json()["rewards"] == answer.json()["rewards"]
    assert sorted(map(str, backend.calls)) == sorted(map(str, calls))  # the same calls to vLLM
    metrics = gateway.get("/metrics").text
    assert 'reward_gateway_items_total{model="rm",result="ok",route="pipeline_reward"} 2.0' in metrics


def test_reward_route_groups_become_the_items_groups(start_gateway, backend):
    template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    gateway = start_gateway(chat_template_mode="gateway", chat_template=template, bos_token="<s>")
    items = {"prompts": ["a", "a", "b"], "responses": ["x", "y", "z"], "groups": [0, 0, 1]}
    answer = gateway.post("/v1/pipeline/reward", json=items)
    assert answer.status_code == 200, answer.text
    # one call per group, as /v1/rewards sends a group's items
    assert [body["input"] for _, body in backend.calls] == [
        ["<user>a<assistant>x", "<user>a<assistant>y"],
        ["<user>b<assistant>z"],
    ]
    assert answer.json()["rewards"] == pytest.approx(
        [logit(t) for t in ("<user>a<assistant>x", "<user>a<assistant>y", "<user>b<assistant>z")]
    )


def test_reward_route_asks_for_the_bearer_token(start_gateway, backend, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    gateway = start_gateway(auth_token_file=str(token_file))
    assert gateway.post("/v1/pipeline/reward", json=ITEMS).status_code == 401
    ok = gateway.post("/v1/pipeline/reward", json=ITEMS, headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200


def test_reward_route_refuses_a_malformed_request(start_gateway, backend):
    answer = start_gateway().post("/v1/pipeline/reward", json={"prompts": ["a"], "responses": ["b", "c"]})
    assert answer.status_code == 400
    assert "responses has 2 entries" in answer.json()["error"]
    assert backend.calls == []
