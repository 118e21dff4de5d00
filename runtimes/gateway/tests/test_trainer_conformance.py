"""Each trainer's client against the real gateway process (`python -m reward_gateway`) and the fake vLLM.

Requests are built as each trainer's client builds them and answers read as it reads them;
what is asserted is what the fake vLLM RECEIVED (the text, add_special_tokens, the BOS count
the model would see, the model name, use_activation) and the number each trainer would train
on. The fake answers out of order (its delay_s, see conftest) so order is tested for real.
Sources, and the gateway-side unit tests these extend rather than repeat:

- OpenRLHF >= 0.9.1, per sample: openrlhf/utils/agent.py (repo 3c3be62 = v0.11.0: request
  L322-356, parsing L280-299; 0.11.2 wheel: L285-304, L327-365). The gateway-mode BOS case
  is test_gateway_chat_template.py::test_trainer_text_is_tokenised_as_openrlhf_serve_rm_does;
  the empty shard is test_gateway_routes.py::test_openrlhf_empty_query_answers_empty_lists.
- OpenRLHF <= 0.9.0, batched: openrlhf/utils/remote_rm_utils.py L10-32 and L51-83 and
  openrlhf/trainer/ppo_utils/experience_maker.py L208-240 (tag v0.9.0).
- verl 0.9: verl/experimental/reward_loop/reward_loop.py L157-195 (_post_request), L197-229
  (the RM prompt), L231-242 (the /classify body and the score) (tag v0.9.0 = the 0.9.1 wheel's
  lines). The in-process pass-through is test_gateway_routes.py::test_verl_classify_*.
- TRL: through reward_gateway_client.trl (clients/python/tests/test_trl.py has the rest).
"""

from __future__ import annotations

import asyncio

import aiohttp
import httpx
import pytest
import requests
from reward_gateway_client.trl import GatewayReward

from reward_testing.fake_vllm import MAX_CHARS, logit
from reward_testing.ports import free_port

LLAMA_BOS = "<|begin_of_text|>"
# A Llama 3 style reward-model template (written for these tests): it writes bos_token itself.
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
)


def llama_render(messages: list[dict]) -> str:
    """LLAMA_TEMPLATE by hand, with the BOS it writes."""
    turns = "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content']}<|eot_id|>" for m in messages)
    return LLAMA_BOS + turns


def bos_seen_by_vllm(backend, body: dict, text: str) -> int:
    """How many BOS tokens the model sees: the text's own, plus the one vLLM's tokenizer adds with
    add_special_tokens (its default: true) where the tokenizer has one."""
    added = body.get("add_special_tokens", True) and backend.bos_token is not None
    return text.count(backend.bos_token or LLAMA_BOS) + int(added)


@pytest.fixture
def gateway_process(run_gateway, backend):
    """The gateway as KServe runs it, its own process; settings are REWARD_GATEWAY_<NAME>."""

    def start(**settings: str) -> str:
        port = free_port()
        env = {"REWARD_GATEWAY_UPSTREAM_URL": backend.url, "REWARD_GATEWAY_MODEL_NAME": "rm"}
        env |= {"REWARD_GATEWAY_PORT": str(port)}
        env |= {f"REWARD_GATEWAY_{key.upper()}": value for key, value in settings.items()}
        url, _ = run_gateway([], env, port, "rm")
        return url

    return start


def requests_counted(url: str, route: str, code: int) -> int:
    line = f'reward_gateway_requests_total{{code="{code}",model="rm",route="{route}"}} '
    for row in httpx.get(f"{url}/metrics").text.splitlines():
        if row.startswith(line):
            return int(float(row[len(line) :]))
    return 0


# --- OpenRLHF >= 0.9.1: one POST per sample, any error retried 5 times, then reward None ---------


async def openrlhf_per_sample(url: str, query: str, prompt: str, label: str, tries: int = 5) -> dict:
    """agent.py: the body (L332-336), aiohttp with a 180 s total timeout (L326), 5 tries (L338-353; the
    1 s sleep between tries left out: nothing here waits on the clock), the answer read as L288-297,
    and every exception swallowed to a sample without a reward (L298-299)."""
    output: dict = {"reward": None}
    body = {"query": [query], "prompts": [prompt], "labels": [label]}
    try:
        answer = None
        for _ in range(tries):
            try:
                async with (
                    aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180)) as session,
                    session.post(url, json=body) as response,
                ):
                    response.raise_for_status()
                    answer = await response.json()
                    break
            except aiohttp.ClientError:
                continue
        if answer is None:
            raise RuntimeError(f"Request error for {tries} times")
        info = answer  # rewards_info_list[0]: one server, one shard
        scores = info.get("scores")
        if scores is None:
            scores = info.get("rewards")
        output.update(reward=info.get("rewards"), scores=scores, extra_logs=info.get("extra_logs") or {})
    except Exception:
        pass
    return output


def policy_query(n: int, bos: str | None) -> tuple[str, str]:
    """decode(prompt_ids + response_ids, skip_special_tokens=False) of a policy with a Llama 3 template."""
    prompt = f"{bos or ''}<|start_header_id|>user<|end_header_id|>\n\nquestion {n}<|eot_id|>"
    return prompt, prompt + f"<|start_header_id|>assistant<|end_header_id|>\n\nanswer {n}<|eot_id|>"


@pytest.mark.parametrize(
    ("configuration", "served_bos", "settings"),
    [
        ("llama_default", LLAMA_BOS, {}),  # the operator's default: no bosToken configured
        ("llama_bos_configured", LLAMA_BOS, {"bos_token": LLAMA_BOS}),
        ("qwen", None, {}),  # a tokenizer without BOS; the query has none either
    ],
)
def test_openrlhf_per_sample_reward(gateway_process, backend, configuration, served_bos, settings):
    """64 concurrent per-sample requests: each sample's reward is the raw logit of its query exactly as
    OpenRLHF's serve_rm.py tokenises it (add_special_tokens=False, text unchanged): one BOS for Llama."""
    backend.bos_token = served_bos
    url = gateway_process(**settings) + "/get_reward"
    samples = [policy_query(n, served_bos) for n in range(64)]

    async def step():
        return await asyncio.gather(*(openrlhf_per_sample(url, q, p, "label") for p, q in samples))

    outputs = asyncio.run(step())

    for (_, query), output in zip(samples, outputs, strict=True):
        assert output["reward"] == pytest.approx([logit(query)]), configuration
        assert output["scores"] == output["reward"] and output["extra_logs"] == {}
    assert len(backend.calls) == 64
    received = {body["input"][0]: body for _, body in backend.calls}
    assert set(received) == {query for _, query in samples}  # each text unchanged
    for text, body in received.items():
        assert body["add_special_tokens"] is False and body["use_activation"] is False
        assert bos_seen_by_vllm(backend, body, text) == (1 if served_bos else 0)


def test_openrlhf_per_sample_gives_up_after_5_tries_and_trains_on_none(gateway_process, backend):
    backend.healthy = False  # a predictor still loading: 503 + Retry-After once the wait is over
    url = gateway_process(scale_from_zero_timeout_seconds="0.2")
    output = asyncio.run(openrlhf_per_sample(url + "/get_reward", "q", "p", "l"))
    assert output["reward"] is None  # no made-up reward
    assert requests_counted(url, "get_reward", 503) == 5


# --- OpenRLHF <= 0.9.0: whole batches, split evenly across the URLs -----------------------------


def openrlhf_batched(urls: list[str], queries: list[str], prompts: list[str], labels: list[str]) -> list[dict]:
    """remote_rm_utils.py: RemoteRewardModel.get_rewards (L67-81) shards evenly across the URLs; each
    shard is request_api_wrapper (L10-27): requests, JSON headers, timeout 180, raise_for_status."""
    size = (len(queries) + len(urls) - 1) // len(urls)
    answers = []
    for i, url in enumerate(urls):
        shard = slice(i * size, min((i + 1) * size, len(queries)))
        body = {"query": queries[shard], "prompts": prompts[shard], "labels": labels[shard]}
        response = requests.post(url, json=body, headers={"Content-Type": "application/json"}, timeout=180)
        response.raise_for_status()
        answers.append(response.json())
    return answers


def flat_split(values: list[list[float]], lengths: list[int]) -> list[list[float]]:
    """torch.cat([as_tensor(v) for v in values]).split(lengths) (experience_maker.py L218), in lists."""
    flat = [float(x) for v in values for x in v]
    out, start = [], 0
    for length in lengths:
        out.append(flat[start : start + length])
        start += length
    return out


def test_openrlhf_batched_legacy_client(gateway_process, backend):
    backend.bos_token = LLAMA_BOS
    url = gateway_process() + "/get_reward"
    samples = [policy_query(n, LLAMA_BOS) for n in range(48)]
    queries, prompts = [q for _, q in samples], [p for p, _ in samples]
    answers = openrlhf_batched([url, url], queries, prompts, ["l"] * 48)

    samples_len = [8] * 6  # micro-rollout batches
    rewards = flat_split([info["rewards"] for info in answers], samples_len)
    assert [r for batch in rewards for r in batch] == pytest.approx([logit(q) for q in queries])
    if "scores" in answers[0]:  # L219-222
        assert flat_split([info["scores"] for info in answers], samples_len) == rewards
    for info in answers:  # L225-231: every extra_logs value must be a list of N numbers
        assert all(len(values) == len(info["rewards"]) for values in info["extra_logs"].values())
    # <= 0.8.2 read only response["rewards"]: a flat list of numbers per shard.
    assert all(isinstance(r, float) for info in answers for r in info["rewards"])
    assert {body["input"][0] for _, body in backend.calls} == set(queries)
    assert all(bos_seen_by_vllm(backend, body, body["input"][0]) == 1 for _, body in backend.calls)


# --- verl 0.9: /classify, one POST per sample, 4xx raised at once, 5xx retried -------------------


class VerlClientError(Exception):
    def __init__(self, status: int):
        self.status = status


async def verl_post(url: str, payload: dict, max_retries: int = 16, on_retry=None) -> dict:
    """reward_loop.py _post_request (L157-195): no timeout, no retry on 4xx, anything else retried
    (back-off 2**attempt capped at 30 s, L188-191: here ``on_retry`` runs instead of the sleep)."""
    last = None
    for attempt in range(max_retries):
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session,
                session.post(f"{url}/classify", json=payload) as response,
            ):
                response.raise_for_status()
                return await response.json()
        except aiohttp.ClientResponseError as error:
            if 400 <= error.status < 500:
                raise VerlClientError(error.status) from error
            last = error
        except aiohttp.ClientError as error:
            last = error
        if attempt < max_retries - 1 and on_retry is not None:
            on_retry(min(2**attempt, 30))
    raise last


def verl_rm_prompt(chat: list[dict], response: str) -> str:
    """_preprocess_reward_inputs (L197-229): raw_prompt plus the response, the RM's template with
    add_generation_prompt=False, then the leading BOS stripped (vLLM adds it back)."""
    rendered = llama_render([*chat, {"role": "assistant", "content": response}])
    return rendered.removeprefix(LLAMA_BOS)


async def verl_score(url: str, rm_prompt: str, **retry) -> float:
    """compute_score_disrm for vLLM (L231-242): the checkpoint path as model, raw logits asked for."""
    payload = {"model": "/models/Skywork-Reward-V2-Llama-3.1-8B", "input": rm_prompt, "use_activation": False}
    output = await verl_post(url, payload, **retry)
    return output["data"][-1]["probs"][-1]


def test_verl_classify_per_sample_under_concurrency(gateway_process, backend):
    backend.bos_token = LLAMA_BOS
    url = gateway_process()
    prompts = [verl_rm_prompt([{"role": "user", "content": f"question {n}"}], f"answer {n}") for n in range(64)]

    async def step():  # the worker gathers its samples' tasks (L138-143)
        return await asyncio.gather(*(verl_score(url, prompt) for prompt in prompts))

    scores = asyncio.run(step())

    assert scores == pytest.approx([logit(prompt) for prompt in prompts])  # raw, in order
    assert len(backend.calls) == 64
    for _, body in backend.calls:
        text = body["input"]
        assert text in prompts  # passed through unchanged: the template was applied once, by verl
        assert body["model"] == "rm"  # the served name, not verl's checkpoint path (vLLM would 404)
        assert body["use_activation"] is False
        assert bos_seen_by_vllm(backend, body, text) == 1  # the one vLLM adds


def test_verl_4xx_is_raised_at_once(gateway_process, backend):
    url = gateway_process()
    with pytest.raises(VerlClientError) as raised:
        asyncio.run(verl_score(url, "x" * (MAX_CHARS + 1)))
    assert raised.value.status == 400
    assert requests_counted(url, "classify", 400) == 1 and len(backend.calls) == 1


def test_verl_retries_a_503_until_the_predictor_is_up(gateway_process, backend):
    backend.healthy = False
    url = gateway_process(scale_from_zero_timeout_seconds="0.2")
    waits: list[float] = []

    def back_off(seconds: float) -> None:  # instead of verl's sleep: the predictor comes up
        waits.append(seconds)
        backend.healthy = True

    score = asyncio.run(verl_score(url, "rendered", on_retry=back_off))
    assert score == pytest.approx(logit("rendered"))
    assert waits == [1]
    assert (requests_counted(url, "classify", 503), requests_counted(url, "classify", 200)) == (1, 1)


# --- TRL: through reward_gateway_client.trl ---------------------------------------------------------


def test_trl_conversations_are_templated_once_with_one_bos(gateway_process, backend):
    """Gateway templating with no BOS configured: the template's bos_token is learnt from vLLM's
    tokenizer, written once, and vLLM adds none (TRL's own RM: apply_chat_template, then
    add_special_tokens=False, grpo_trainer.py L1639-1649)."""
    backend.bos_token = LLAMA_BOS
    url = gateway_process(chat_template_mode="gateway", chat_template=LLAMA_TEMPLATE, eos_token="<|eot_id|>")
    prompts = [[{"role": "user", "content": f"question {n // 4}"}] for n in range(8)]
    completions = [[{"role": "assistant", "content": f"answer {n}"}] for n in range(8)]
    reward = GatewayReward(url)
    rewards = reward(prompts=prompts, completions=completions, completion_ids=None, trainer_state=None)

    texts = [llama_render(p + c) for p, c in zip(prompts, completions, strict=True)]
    assert rewards == pytest.approx([logit(text) for text in texts])
    assert requests_counted(url, "rewards", 200) == 1
    scored = [body for path, body in backend.calls if path == "/classify"]
    assert len(scored) == 2  # one vLLM call per GRPO group
    for body in scored:
        for text in body["input"]:
            assert text.startswith(LLAMA_BOS) and bos_seen_by_vllm(backend, body, text) == 1


def test_trl_standard_text_reaches_vllm_unchanged(gateway_process, backend):
    backend.bos_token = LLAMA_BOS
    url = gateway_process()
    prompts, completions = ["2+2=", "2+2="], [" 4", " 5"]
    rewards = GatewayReward(url)(prompts=prompts, completions=completions)
    assert rewards == pytest.approx([logit("2+2= 4"), logit("2+2= 5")])
    [(_, body)] = backend.calls
    assert body["input"] == ["2+2= 4", "2+2= 5"] and body["add_special_tokens"] is False
