"""verl's reward loop puts the served model's reward at each response's last token.

drivers/verl_reward_loop.py runs, under the verl venv, verl's ``RewardLoopManager`` on a local Ray
with the overrides of the docs' snippet ``verl``: our ``compute_score`` loaded through
``reward.custom_reward_function``, its URL the RewardModel's. The token-level tensor it returns must
hold transformers' score for each prompt and response (as verl decoded the response) at the
response's last valid token, and zero everywhere else. The same settings under the top-level
``custom_reward_function.`` key that older docs show load nothing: verl falls back to its default scorer.
"""

from __future__ import annotations

import re
import shutil
import tempfile

import reward_gateway_client.verl
from samples import SAMPLES
from summary import TOLERANCE, max_diff, report
from trainer_venvs import run_driver, snippet


def overrides(status_url: str) -> list[str]:
    """The docs' Hydra overrides, with this checkout's compute_score and this RewardModel's URL."""
    text = snippet("verl").replace("$STATUS_URL", status_url.rstrip("/"))
    text = re.sub(r"\$\(python -c '[^']*'\)", reward_gateway_client.verl.__file__, text)
    return re.findall(r"^\s*(\+?reward\.\S+)", text, re.M)


def test_verl_reward_loop_puts_the_models_score_at_each_last_token(served, transformers_scores):
    settings = [*overrides(served.url), f"actor_rollout_ref.model.path={served.model.path}"]
    assert any(s.startswith("reward.custom_reward_function.path=") for s in settings), settings
    ray_dir = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths must fit in 107 characters
    try:
        ran = run_driver("verl", "verl_reward_loop", {"overrides": settings, "tokenizer": str(served.model.path),
                                                      "ray_dir": ray_dir, "samples": SAMPLES}, served.wrap)  # fmt: skip
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    want = transformers_scores([{"messages": [*sample["messages"], {"role": "assistant", "content": response}]}
                                for sample, response in zip(SAMPLES, ran["responses"], strict=True)])  # fmt: skip
    got = []
    for row, last in zip(ran["rm_scores"], ran["last_token"], strict=True):
        got.append(row[last])
        assert all(value == 0 for i, value in enumerate(row) if i != last), row
    diff = max_diff(got, want)
    # the older docs' top-level key: verl composes it and never loads the function (its default scorer runs)
    assert ran["legacy_key_loads"] is False
    report(f"verl {ran['version']} RewardLoopManager ({ran['workers']} Ray workers) on {served.where}: "
           f"{len(SAMPLES)} samples scored, max |diff| vs transformers {diff:.2e}")  # fmt: skip
    assert diff <= TOLERANCE


def test_a_sample_over_the_models_context_stops_verls_step_with_the_reason_never_a_number(served):
    """verl's reward loop makes one tensor of every sample's score (assemble_rm_scores) and has no missing reward:
    the gateway answers the over-long sample as a failure in the worker's one request, compute_score raises
    ItemFailed for that sample alone, and verl's own code stops the step with that reason; no rm_scores come
    back with a number in its place."""
    over_long = {"messages": [{"role": "user", "content": "say reward many times"}], "response": "reward " * 1200}
    settings = [*overrides(served.url), f"actor_rollout_ref.model.path={served.model.path}"]
    ray_dir = tempfile.mkdtemp(prefix="ray-")
    try:
        ran = run_driver("verl", "verl_reward_loop", {"overrides": settings, "tokenizer": str(served.model.path),
                                                      "ray_dir": ray_dir, "samples": [*SAMPLES, over_long]},
                         served.wrap)  # fmt: skip
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert "rm_scores" not in ran, ran
    assert "ItemFailed" in ran["error"] and "too_long" in ran["error"], ran["error"]
    report(f"verl {ran['version']} RewardLoopManager on {served.where} with one sample over the model's context: "
           f"the step stopped with the reason ({ran['error'][:80]}...), no score made up")  # fmt: skip
