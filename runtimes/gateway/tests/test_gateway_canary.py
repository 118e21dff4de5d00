"""Rolling out a candidate reward model (reward_gateway.rollout.canary): shadow scoring and sticky splits,
against two real HTTP fake vLLMs whose scores differ, through the real gateway app."""

from __future__ import annotations

import hashlib
import math
import time
from itertools import pairwise

import pytest

from reward_gateway.http.routes import MODEL_HEADER
from reward_gateway.rollout.canary import BUCKETS, bucket, sticky_key, takes_candidate
from reward_testing.fake_vllm import logit
from reward_testing.ports import free_port
from reward_testing.projected_volume import project
from reward_testing.waiting import wait_until

# The candidate's raw scores lie far from the stable model's (about -20..20), so an
# answer's rewards tell which model scored them.
CANDIDATE_OFFSET = 1000.0

# Fixed scores, the hand computation of test_the_canary_summary_matches_a_hand_computation:
# (text, group, stable score x, candidate score y).
FIXED = [
    ("a1", "a", 1.0, 0.5),
    ("a2", "a", 2.0, 0.1),
    ("a3", "a", 3.0, 0.9),
    ("a4", "a", 3.0, 0.7),
    ("b1", "b", 0.0, 2.0),
    ("b2", "b", -1.0, 2.0),
    ("b3", "b", 5.0, 3.0),
    ("u", None, 12.0, -4.2),  # no group: in the score shift, in no pair
]
# Pairs by hand:
#   a: (1,2) x up, y .5 -> .1 down: discordant; (1,3) (1,3') (2,3) (2,3') concordant;
#      (3,3') x tied, y .9 vs .7: stable-tied                  -> C 4, D 1, stable-tied 1
#   b: (0,-1) y 2 = 2: candidate-tied; (0,5) (-1,5) concordant -> C 2, candidate-tied 1
HAND_PAIRS = {"concordant": 6, "discordant": 1, "candidate_tied": 1, "stable_tied": 1, "both_tied": 0}
# Agreement: (C + Tc / 2) / (C + D + Tc) = 6.5 / 8; tau-b: (C - D) / sqrt((C + D + Tc)(C + D + Ts)) = 5 / 8.
HAND_AGREEMENT, HAND_TAU_B = 0.8125, 0.625
# Over the 8 items: x sums to 25 (mean 3.125), squared deviations 114.875; y sums to 5 (mean .625),
# squared deviations 33.075; y - x: -.5 -1.9 -2.1 -2.3 2 3 -2 -16.2, mean -2.5, squared deviations 243.
HAND_MEAN = {"stable": 3.125, "candidate": 0.625}
HAND_STDDEV = {"stable": math.sqrt(114.875 / 8), "candidate": math.sqrt(33.075 / 8)}
HAND_DIFFERENCE = (-2.5, math.sqrt(243 / 8))


def fixed_items() -> list[dict]:
    return [{"text": text} | ({"group": group} if group else {}) for text, group, _, _ in FIXED]


def within_binomial(count: int, n: int, percent: int) -> bool:
    """The stated tolerance: 3 standard deviations of binomial(n, p) around n p (99.7 % of draws)."""
    p = percent / 100
    return abs(count - n * p) <= 3 * math.sqrt(n * p * (1 - p))


@pytest.fixture
def rollout(start_gateway, backend, candidate_backend):
    """A gateway with the candidate behind `candidate_backend`: REWARD_GATEWAY_CANARY_* as keywords,
    other settings in `env`. The window keeps everything (half-life 0), so figures are exact."""

    def start(env: dict[str, str] | None = None, **canary: str):
        candidate_backend.offset = CANDIDATE_OFFSET
        settings = {"canary_url": candidate_backend.url, "canary_model_name": "rm-v2", "canary_half_life_seconds": "0"}
        settings.update({f"canary_{key}": value for key, value in canary.items()})
        return start_gateway(**settings, **(env or {}))

    return start


def sample(gateway, name: str, **labels: str) -> float | None:
    return gateway.gateway.metrics.registry.get_sample_value(name, labels)


def score_rewards(gateway, items: list[dict], **headers: str):
    answer = gateway.post("/v1/rewards", json={"items": items}, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()["rewards"], answer.headers[MODEL_HEADER]


# ---- the pure parts: the hash and the sticky key ----------------------------------------


def test_the_buckets_spread_evenly_and_a_share_is_reached_within_its_binomial_tolerance():
    keys = [f"group-{i}".encode() for i in range(20_000)]
    for percent in (1, 10, 25, 50, 90):
        count = sum(takes_candidate(b"rm-v2", key, percent) for key in keys)
        assert within_binomial(count, len(keys), percent), (percent, count)
    assert {bucket(b"rm-v2", key) for key in keys} <= set(range(BUCKETS))


def test_the_choice_is_deterministic_monotone_in_the_share_and_drawn_anew_for_each_candidate():
    keys = [f"group-{i}".encode() for i in range(2000)]
    steps = [0, 10, 25, 50, 100]
    chosen = [{key for key in keys if takes_candidate(b"rm-v2", key, percent)} for percent in steps]
    assert chosen[0] == set() and chosen[-1] == set(keys)
    for smaller, larger in pairwise(chosen):
        assert smaller <= larger  # a progressive step only moves keys to the candidate
    again = {key for key in keys if takes_candidate(b"rm-v2", key, 25)}
    assert again == chosen[2]
    other = {key for key in keys if takes_candidate(b"rm-v3", key, 25)}
    assert other != chosen[2]  # another rollout, other keys first


def test_the_sticky_key_client_then_token_hash_then_group_then_the_request():
    body = b'{"items": []}'
    assert sticky_key("client", "job-7", "Bearer t0k3n", ["g"], body) == b"client:job-7"
    by_token = sticky_key("client", None, "Bearer t0k3n", ["g"], body)
    assert by_token == b"token:" + hashlib.sha256(b"Bearer t0k3n").digest()
    assert b"t0k3n" not in by_token  # the token itself is never a key
    assert sticky_key("client", None, None, [None, "g2", "g3"], body) == b"group:g2"
    assert sticky_key("group", "job-7", "Bearer t0k3n", ["g1"], body) == b"group:g1"  # client: not asked for
    assert sticky_key("group", None, None, [None, None], body) == b"request:" + body
    assert sticky_key("group", None, None, None, body) == b"request:" + body


# ---- shadow --------------------------------------------------------------------------------


def test_shadow_returns_only_the_stable_scores_while_the_candidates_are_counted(rollout, backend, candidate_backend):
    gateway = rollout()
    items = [{"text": f"completion {i}", "group": "g"} for i in range(4)]
    rewards, model = score_rewards(gateway, items)
    assert rewards == pytest.approx([logit(f"completion {i}") for i in range(4)])
    assert model == "stable"
    # Both models scored every item, each under its own served name.
    assert [body["input"] for _, body in backend.calls] == [[item["text"] for item in items]]
    assert [(body["input"], body["model"]) for _, body in candidate_backend.calls] == [
        ([item["text"] for item in items], "rm-v2")
    ]
    pair = {"model": "rm", "candidate": "rm-v2"}
    assert sample(gateway, "reward_gateway_canary_items_total", **pair) == 4
    for role in ("stable", "candidate"):
        assert sample(gateway, "reward_gateway_canary_requests_total", **pair, role=role, result="ok") == 1
    assert sample(gateway, "reward_gateway_canary_answers_total", **pair, role="stable") == 1
    assert sample(gateway, "reward_gateway_canary_answers_total", **pair, role="candidate") == 0
    # The candidate's scores never reach the trainer's histogram.
    assert sample(gateway, "reward_gateway_score_count", model="rm") == 4
    assert sample(gateway, "reward_gateway_score_count", model="rm-v2") == 0
    # The two fakes order the group's items the same way (an offset keeps the order).
    summary = gateway.get("/canary").json()
    assert summary["pairs"]["concordant"] == 6 and summary["agreement"] == 1.0


def test_the_canary_summary_matches_a_hand_computation(rollout, backend, candidate_backend):
    backend.fixed = {text: x for text, _, x, _ in FIXED}
    candidate_backend.fixed = {text: y for text, _, _, y in FIXED}
    gateway = rollout()
    rewards, _ = score_rewards(gateway, fixed_items())
    assert rewards == [x for _, _, x, _ in FIXED]
    summary = gateway.get("/canary").json()
    assert {key: summary[key] for key in ("model", "candidate", "mode", "percent", "sticky")} == {
        "model": "rm",
        "candidate": "rm-v2",
        "mode": "shadow",
        "percent": 0,
        "sticky": "group",
    }
    assert summary["half_life_seconds"] is None  # 0 in the environment: everything since start
    assert summary["pairs"] == HAND_PAIRS | {"ordered_by_stable": 8}
    assert summary["agreement"] == pytest.approx(HAND_AGREEMENT)
    assert summary["kendall_tau_b"] == pytest.approx(HAND_TAU_B)
    assert summary["items"] == 8
    for role in ("stable", "candidate"):
        model = summary["models"][role]
        assert model["score_mean"] == pytest.approx(HAND_MEAN[role])
        assert model["score_stddev"] == pytest.approx(HAND_STDDEV[role])
        assert (model["requests"], model["errors"], model["error_ratio"]) == (1, 0, 0)
        assert model["latency_mean_seconds"] > 0 and model["latency_stddev_seconds"] == 0  # one request
    assert summary["models"]["stable"]["answers"] == 1 and summary["models"]["candidate"]["answers"] == 0
    assert summary["answer_share"] == 0
    assert summary["score_difference_mean"] == pytest.approx(HAND_DIFFERENCE[0])
    assert summary["score_difference_stddev"] == pytest.approx(HAND_DIFFERENCE[1])
    # The window's gauges in /metrics say the same.
    pair = {"model": "rm", "candidate": "rm-v2"}
    assert sample(gateway, "reward_gateway_canary_agreement_ratio", **pair) == pytest.approx(HAND_AGREEMENT)
    assert sample(gateway, "reward_gateway_canary_kendall_tau_b", **pair) == pytest.approx(HAND_TAU_B)


def test_shadow_with_the_candidate_down_leaves_the_trainer_unaffected_and_counts_its_errors(start_gateway, backend):
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gateway = start_gateway(
        canary_url=down, canary_name="rm-v2", canary_half_life_seconds="0", request_timeout_seconds="60"
    )
    for round_ in range(3):
        items = [{"text": f"round {round_} item {i}", "group": "g"} for i in range(3)]
        rewards, model = score_rewards(gateway, items)
        assert rewards == pytest.approx([logit(item["text"]) for item in items]) and model == "stable"
    summary = gateway.get("/canary").json()
    assert summary["models"]["candidate"] | {"latency_mean_seconds": None, "latency_stddev_seconds": None} == {
        "name": "rm-v2",
        "requests": 3,
        "errors": 3,
        "error_ratio": 1.0,
        "answers": 0,
        "latency_mean_seconds": None,
        "latency_stddev_seconds": None,
        "score_mean": None,
        "score_stddev": None,
    }
    assert summary["models"]["stable"]["error_ratio"] == 0 and summary["agreement"] is None
    # Refused at once (the candidate never waits for a cold start), under its own name.
    assert sample(gateway, "reward_gateway_upstream_errors_total", model="rm-v2", reason="connect") == 3
    assert sample(gateway, "reward_gateway_upstream_errors_total", model="rm", reason="connect") == 0
    assert sample(gateway, "reward_gateway_requests_total", model="rm", route="rewards", code="200") == 3


def test_a_candidate_slower_than_the_shadow_wait_is_cancelled_not_waited_for(rollout, backend, candidate_backend):
    candidate_backend.misbehaviour = "hang"  # answers only once the gateway hangs up
    gateway = rollout(shadow_wait_seconds="0.2")
    started = time.monotonic()
    rewards, model = score_rewards(gateway, [{"text": "slow one", "group": "g"}, {"text": "other", "group": "g"}])
    # The stable model's time plus the 0.2 s wait, far inside the 180 s a call may take.
    assert time.monotonic() - started < 20
    assert rewards == pytest.approx([logit("slow one"), logit("other")]) and model == "stable"
    wait_until("the candidate's call to be closed", lambda: candidate_backend.abandoned == 1, timeout=10, interval=0.02)
    candidate = gateway.get("/canary").json()["models"]["candidate"]
    assert (candidate["requests"], candidate["errors"]) == (1, 1)
    assert candidate["latency_mean_seconds"] >= 0.2


def test_when_the_stable_model_fails_in_shadow_the_trainer_hears_at_once_and_the_candidate_is_let_go(
    rollout, backend, candidate_backend
):
    backend.misbehaviour = "429"
    candidate_backend.misbehaviour = "hang"
    gateway = rollout(shadow_wait_seconds="60")
    answer = gateway.post("/v1/rewards", json={"items": [{"text": "x"}]})
    assert answer.status_code == 503 and answer.headers[MODEL_HEADER] == "stable"
    wait_until("the candidate's call to be closed", lambda: candidate_backend.abandoned == 1, timeout=10, interval=0.02)
    summary = gateway.get("/canary").json()["models"]
    assert (summary["stable"]["requests"], summary["stable"]["errors"]) == (1, 1)
    assert summary["candidate"]["requests"] == 0  # cancelled for the stable model's failure: says nothing


def test_shadow_on_openrlhf_groups_by_prompt_and_on_verl_classify_compares_scores(rollout, backend, candidate_backend):
    gateway = rollout()
    query = ["p1 a", "p1 b", "p1 c", "p2 a", "p2 b"]
    answer = gateway.post("/get_reward", json={"query": query, "prompts": ["p1"] * 3 + ["p2"] * 2})
    assert answer.json()["rewards"] == pytest.approx([logit(q) for q in query])
    assert answer.headers[MODEL_HEADER] == "stable"
    summary = gateway.get("/canary").json()
    assert summary["pairs"]["concordant"] == 3 + 1  # pairs within each prompt's completions
    classify = gateway.post("/classify", json={"model": "whatever", "input": ["v1", "v2"]})
    assert [entry["probs"][0] for entry in classify.json()["data"]] == pytest.approx([logit("v1"), logit("v2")])
    assert candidate_backend.calls[-1][1]["model"] == "rm-v2"
    summary = gateway.get("/canary").json()
    assert summary["items"] == 5 + 2 and summary["pairs"]["concordant"] == 4  # verl's batch has no groups
    assert summary["score_difference_mean"] == pytest.approx(CANDIDATE_OFFSET)


# ---- split ---------------------------------------------------------------------------------


def test_split_keeps_each_group_on_one_model_and_reaches_the_share(rollout, backend, candidate_backend):
    percent, n = 30, 300
    gateway = rollout(mode="split", percent=str(percent))
    answered = {}
    for i in range(n):
        items = [{"text": f"request {i} completion {j}", "group": f"prompt-{i}"} for j in range(4)]
        rewards, model = score_rewards(gateway, items)
        from_candidate = [reward > CANDIDATE_OFFSET / 2 for reward in rewards]
        assert from_candidate in ([True] * 4, [False] * 4), "a group was scored by two models"
        assert model == ("candidate" if from_candidate[0] else "stable")
        offset = CANDIDATE_OFFSET if from_candidate[0] else 0.0
        assert rewards == pytest.approx([logit(item["text"]) + offset for item in items])
        answered[i] = model
    count = sum(model == "candidate" for model in answered.values())
    assert within_binomial(count, n, percent), f"{count} of {n} requests on the candidate at {percent} %"
    # Sticky: the same group sent again is scored by the same model.
    for i in range(0, n, 15):
        items = [{"text": f"request {i} completion {j}", "group": f"prompt-{i}"} for j in range(4)]
        assert score_rewards(gateway, items)[1] == answered[i]
    summary = gateway.get("/canary").json()
    resent = n // 15
    candidate_answers = count + sum(answered[i] == "candidate" for i in range(0, n, 15))
    assert summary["models"]["candidate"]["answers"] == candidate_answers
    assert summary["models"]["stable"]["answers"] == n + resent - candidate_answers
    assert summary["answer_share"] == pytest.approx(candidate_answers / (n + resent))
    # The stable model also scored the candidate's requests, in shadow: agreement is still measured.
    assert summary["models"]["stable"]["requests"] == n + resent
    assert summary["pairs"]["concordant"] == 6 * candidate_answers and summary["agreement"] == 1.0
    # The trainer's histogram of each model holds only the scores that model answered with.
    assert sample(gateway, "reward_gateway_score_count", model="rm-v2") == 4 * candidate_answers


def test_split_at_zero_and_at_one_hundred(rollout, backend, candidate_backend):
    gateway = rollout(mode="split", percent="0")
    assert score_rewards(gateway, [{"text": "x", "group": "g"}])[1] == "stable"
    assert candidate_backend.calls == []  # a rollback to 0 leaves the candidate alone
    gateway = rollout(mode="split", percent="100")
    rewards, model = score_rewards(gateway, [{"text": "y", "group": "g"}])
    assert model == "candidate" and rewards == pytest.approx([logit("y") + CANDIDATE_OFFSET])


def test_a_running_gateway_follows_its_share_file_and_keeps_counting(rollout, backend, candidate_backend, tmp_path):
    """The operator's rollout ConfigMap moves the share of a gateway that keeps running: no restart, the
    same process and figures, and content that is no share never becomes one."""
    gateway = rollout(mode="split", percent_file=str(project(tmp_path, "0")))
    for text in ("a", "b", "c"):
        assert score_rewards(gateway, [{"text": text, "group": text}])[1] == "stable"
    before = gateway.get("/canary").json()
    assert before["percent"] == 0 and before["models"]["stable"]["answers"] == 3
    project(tmp_path, "100")
    wait_until("the new share", lambda: gateway.get("/canary").json()["percent"] == 100, timeout=10, interval=0.05)
    rewards, model = score_rewards(gateway, [{"text": "d", "group": "d"}])
    assert model == "candidate" and rewards == pytest.approx([logit("d") + CANDIDATE_OFFSET])
    after = gateway.get("/canary").json()
    # one window across the step: the stable model's three answers are still there, and its shadow call
    assert (after["models"]["stable"]["answers"], after["models"]["candidate"]["answers"]) == (3, 1)
    assert after["models"]["stable"]["requests"] == before["models"]["stable"]["requests"] + 1
    project(tmp_path, "250")
    project(tmp_path, "100")  # the poll may or may not have seen 250 in between: never as a share
    project(tmp_path, "40")
    wait_until("the next share", lambda: gateway.get("/canary").json()["percent"] == 40, timeout=10, interval=0.05)


def test_a_failing_candidate_in_a_split_is_replaced_by_the_stable_model_for_the_whole_request(
    rollout, backend, candidate_backend
):
    candidate_backend.healthy = False  # vLLM's 503 while loading
    gateway = rollout(mode="split", percent="100")
    items = [{"text": f"t{i}", "group": "g"} for i in range(3)]
    rewards, model = score_rewards(gateway, items)
    assert model == "stable" and rewards == pytest.approx([logit(f"t{i}") for i in range(3)])
    summary = gateway.get("/canary").json()["models"]
    assert (summary["candidate"]["requests"], summary["candidate"]["errors"], summary["candidate"]["answers"]) == (
        1,
        1,
        0,
    )
    assert summary["stable"]["answers"] == 1
    assert sample(gateway, "reward_gateway_upstream_errors_total", model="rm-v2", reason="status_5xx") == 1
    backend.misbehaviour = "429"  # both fail: the stable model's failure is the answer
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 503 and answer.headers[MODEL_HEADER] == "stable"


def test_split_sticky_per_client_by_header_or_by_token(rollout, backend, candidate_backend, tmp_path):
    tokens = [f"token-{i}" for i in range(40)]
    token_file = tmp_path / "tokens"
    token_file.write_text("\n".join(tokens) + "\n")
    gateway = rollout(mode="split", percent="50", sticky="client")
    seen: dict[str, set[str]] = {}
    for client in range(40):
        for request in range(3):
            items = [{"text": f"c{client} r{request} {j}", "group": f"c{client}-g{request}"} for j in range(2)]
            _, model = score_rewards(gateway, items, **{"X-Reward-Client": f"job-{client}"})
            seen.setdefault(f"job-{client}", set()).add(model)
    assert all(len(models) == 1 for models in seen.values()), "a client's requests went to two models"
    assert {next(iter(models)) for models in seen.values()} == {"stable", "candidate"}
    # Without the header, the bearer token tells the clients apart.
    gateway = rollout({"auth_token_file": str(token_file)}, mode="split", percent="50", sticky="client")
    by_token: dict[str, set[str]] = {}
    for token in tokens:
        for request in range(2):
            items = [{"text": f"{token} r{request}", "group": f"{token}-{request}"}]
            _, model = score_rewards(gateway, items, Authorization=f"Bearer {token}")
            by_token.setdefault(token, set()).add(model)
    assert all(len(models) == 1 for models in by_token.values())
    assert {next(iter(models)) for models in by_token.values()} == {"stable", "candidate"}


# ---- the summary's door --------------------------------------------------------------------


def test_the_summary_answers_without_the_token_and_only_during_a_rollout(start_gateway, rollout, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    gateway = rollout({"auth_token_file": str(token_file)})
    assert gateway.get("/canary").status_code == 200  # like /metrics: figures, no scores or texts
    assert gateway.post("/v1/rewards", json={"items": [{"text": "x"}]}).status_code == 401
    assert gateway.post("/canary", json={}).status_code == 405
    plain = start_gateway()
    assert plain.get("/canary").status_code == 404
    answer = plain.post("/v1/rewards", json={"items": [{"text": "x"}]})
    assert MODEL_HEADER not in answer.headers  # no rollout, no header: the wire format is unchanged


def test_a_rollouts_requests_are_charged_for_two_models(rollout, start_gateway):
    """Two models may score a request at once: the ASGI front's memory charge counts both."""
    assert rollout().app.copies == 2
    assert start_gateway().app.copies == 1


def test_the_candidate_renders_its_own_template_and_a_refusal_of_its_own_is_its_error(
    rollout, backend, candidate_backend
):
    stable_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    env = {"chat_template_mode": "gateway", "chat_template": stable_template}
    gateway = rollout(env, chat_template="{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }} {% endfor %}")
    rewards, model = score_rewards(gateway, [{"prompt": "q", "response": "a", "group": "g"}])
    assert (rewards, model) == (pytest.approx([logit("<user>q<assistant>a")]), "stable")
    assert backend.calls[-1][1]["input"] == ["<user>q<assistant>a"]
    assert candidate_backend.calls[-1][1]["input"] == ["[user] q [assistant] a "]
    # A candidate whose template refuses what the stable model scores: in a split, the stable model answers.
    gateway = rollout(env, mode="split", percent="100", chat_template="{{ raise_exception('no assistant turns') }}")
    rewards, model = score_rewards(gateway, [{"prompt": "q", "response": "b", "group": "g"}])
    assert (rewards, model) == (pytest.approx([logit("<user>q<assistant>b")]), "stable")
    candidate = gateway.get("/canary").json()["models"]["candidate"]
    assert (candidate["requests"], candidate["errors"], candidate["answers"]) == (1, 1, 0)
