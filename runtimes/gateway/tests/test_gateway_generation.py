"""The RewardModel's generation followed from the identity ConfigMap as mounted (reward_gateway.config.generation):
in every answer from the start, a new one taken up without a restart, bad content kept out."""

from __future__ import annotations

import logging

import pytest

from reward_gateway.config.gateway import ConfigError, load_config
from reward_gateway.config.generation import followed, parse_generation
from reward_testing.projected_volume import project
from reward_testing.waiting import wait_until

KEY = "generation"


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "reward_gateway"]


def answered_generation(gateway, **headers: str) -> tuple[object, str | None]:
    answer = gateway.post("/v1/rewards", json={"items": [{"text": "a"}]}, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()["identity"]["generation"], answer.headers.get("X-Reward-Model-Generation")


@pytest.mark.parametrize(("text", "generation"), [("7", 7), ("12\n", 12), ("", None), ("\n", None)])
def test_a_generation_is_a_positive_integer_or_unknown(text, generation):
    assert parse_generation(text) == generation


@pytest.mark.parametrize("text", ["0", "-1", "abc", "1.5", "٣"])
def test_anything_else_is_no_generation(text):
    with pytest.raises(ValueError):
        parse_generation(text)


def test_the_answers_carry_the_files_generation_and_take_up_a_new_one_without_a_restart(tmp_path, start_gateway):
    path = project(tmp_path, "3", KEY)
    gateway = start_gateway(model_generation_file=str(path))
    assert answered_generation(gateway) == (3, "3")
    project(tmp_path, "4", KEY)
    wait_until("the gateway follows the file", lambda: answered_generation(gateway) == (4, "4"), timeout=30)


def test_bad_content_keeps_the_last_good_generation_with_one_warning_each(tmp_path, caplog):
    identity = {"generation": None}
    path = project(tmp_path, "5", KEY)
    generation = followed(str(path), [identity])
    caplog.set_level(logging.WARNING, logger="reward_gateway")
    for bad in ("abc", "0", "-2", "9" * 40):
        project(tmp_path, bad, KEY)
        generation.refresh()
        generation.refresh()  # the same content again: no second warning
        assert identity["generation"] == 5, bad
    assert len(warnings(caplog)) == 4
    path.unlink()
    generation.refresh()
    assert identity["generation"] == 5 and "cannot be read" in warnings(caplog)[-1]
    project(tmp_path, "", KEY)
    generation.refresh()
    assert identity["generation"] is None, "an empty file is an unknown generation, taken up as such"


def test_a_missing_file_at_start_is_an_unknown_generation_and_a_warning_never_a_crash(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="reward_gateway")
    identity = {"generation": None}
    followed(str(tmp_path / KEY), [identity])
    assert identity["generation"] is None and len(warnings(caplog)) == 1


def test_the_candidate_follows_the_stable_models_generation(tmp_path, start_gateway, backend, candidate_backend):
    path = project(tmp_path, "8", KEY)
    gateway = start_gateway(
        model_generation_file=str(path), canary_url=candidate_backend.url, canary_mode="split", canary_percent="100"
    )
    assert answered_generation(gateway) == (8, "8")
    (candidate,) = [b for role, b in gateway.gateway.canary.backends.items() if role == "candidate"]
    assert candidate.identity["generation"] == 8 and candidate.identity["role"] == "candidate"
    project(tmp_path, "9", KEY)
    gateway.gateway.generation.refresh()
    assert candidate.identity["generation"] == 9


def test_a_generation_comes_from_the_environment_or_the_file_never_both(tmp_path):
    env = {"REWARD_GATEWAY_UPSTREAM_URL": "http://vllm", "REWARD_GATEWAY_MODEL_NAME": "rm"}
    env |= {"REWARD_GATEWAY_MODEL_GENERATION": "2", "REWARD_GATEWAY_MODEL_GENERATION_FILE": str(tmp_path / KEY)}
    with pytest.raises(ConfigError, match="both set"):
        load_config(env)
