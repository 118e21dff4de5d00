"""The routes of a gateway in an RLHFPipeline role, as KServe's InferenceGraph router calls them.

The operator's graph (operator/reward_operator/render/inferencegraph.py) POSTs JSON
to each step and needs a JSON object back from each, so every route here takes
and answers one. A gateway in a role (REWARD_GATEWAY_PIPELINE_ROLE) serves its
role's routes only:

- actor: ``/v1/pipeline/input`` (a score request, checked and answered back),
  ``generate`` and ``candidates`` (vLLM's completions API: one, or
  REWARD_GATEWAY_PIPELINE_BEST_OF_N, completions per prompt, answered as a score
  request), ``combine`` and ``select`` (the Ensembles' parts: reward_gateway.pipeline.combine);
- reference: ``/v1/pipeline/logprobs`` (each response token's log-probability);
- critic: ``/v1/pipeline/values`` (each response token's value).

Where the response starts: vLLM's ``/tokenize`` of the prompt, with the special
tokens vLLM adds to a completion's prompt (its BOS), says how many of the
prompt+response text's tokens are the prompt's. A token that straddles the
boundary (the prompt's last characters and the response's first, merged) is
therefore counted with the prompt. The reference and the critic use the same
rule, so their rows line up token by token where they share a tokenizer.
Counting tokens, not characters: vLLM's ``text_offset`` adds up the tokens'
decoded strings, which start with the BOS's text (``<|begin_of_text|>``, 17
characters) and differ from the text where a character spans tokens.

vLLM's failures are answered as on the scoring routes (reward_gateway.upstream.client):
503 while it is away, 502 for a broken or malformed answer, 504 for none in time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from reward_gateway.config.gateway import GatewayConfig
from reward_gateway.items.errors import BadRequest, NotFound, all_or_first_failure
from reward_gateway.items.extract import bad_response, ordered_data, token_values
from reward_gateway.items.kinds import KINDS
from reward_gateway.items.wire import GenerateRequest, PipelineItems, parse, parse_json, validate
from reward_gateway.pipeline.combine import (
    CRITIC_STEP,
    INPUT_STEP,
    REFERENCE_STEP,
    Combiner,
    best_by_group,
    reward_parts,
    rows_of_numbers,
    step_error,
    unexpected_steps,
)
from reward_gateway.upstream.client import ANSWER_BASE_BYTES, VllmClient

PATH_PREFIX = "/v1/pipeline/"
COMPLETIONS_PATH = "/v1/completions"
POOLING_PATH = "/pooling"
# The critic's vLLM pools every token (ALL) with token_classify, as a token reward model's.
CRITIC_KIND = KINDS["token"]

# A generated answer's size is bounded by what is generated, not by what is sent:
# per choice its envelope plus each token's text as JSON (escapes included).
CHOICE_BYTES = 1024
GENERATED_BYTES_PER_TOKEN = 64
# Without max_tokens, vLLM's default (16 for its completions API, or a server's
# generation config) decides; bounded here by a long context's worth.
UNSET_MAX_TOKENS_BOUND = 32768
# The reference's answer: per token its string, log-probability, offset and top
# entry: about 60 bytes of JSON; at a token per byte sent, more than the default
# bound of reward_gateway.upstream.client allows.
ECHO_ANSWER_BYTES_PER_BYTE_SENT = 160

# What vLLM's answers add to a request's memory charge (reward_gateway.http.asgi), per
# byte of the request. Critic: the same /pooling answer as a token reward model's.
# Reference: measured as the critic's was (orjson, tracemalloc, a token per byte: about 1020):
# the echoed tokens, log-probabilities, offsets and top entries at their peak.
# Actor: generated text is bounded by max_tokens, which the charge by bytes does not
# see (runtimes/gateway/README.md, Pipeline roles).
ANSWER_COST_PER_BYTE = {"actor": 0, "reference": 1100, "critic": CRITIC_KIND.answer_cost_per_byte}

# (request body, admit(item count)) -> the answer; admit counts the items (metrics, load)
# and refuses more than REWARD_GATEWAY_MAX_ITEMS.
Route = Callable[[bytes, Callable[[int], None]], Awaitable[dict[str, Any]]]


class PipelineRole:
    """One role's routes, by the label of their metrics, and the paths they answer on."""

    def __init__(self, config: GatewayConfig, client: VllmClient):
        if config.pipeline_role is None:
            raise ValueError("not a pipeline role's configuration")
        self.config = config
        self.client = client
        self.role = config.pipeline_role
        self.combiner = Combiner(config.pipeline_rewards)
        self.answer_cost_per_byte = ANSWER_COST_PER_BYTE[self.role]
        by_role: dict[str, dict[str, Route]] = {
            "actor": {
                "input": self.input,
                "generate": self.generate,
                "candidates": self.candidates,
                "combine": self.combine,
                "select": self.select,
            },
            "reference": {"logprobs": self.logprobs},
            "critic": {"values": self.values},
        }
        self.routes = {f"pipeline_{name}": route for name, route in by_role[self.role].items()}
        self.paths = {PATH_PREFIX + label.removeprefix("pipeline_"): label for label in self.routes}

    # actor

    async def input(self, body: bytes, admit: Callable[[int], None]) -> dict[str, Any]:
        request = self._items(body, admit)
        return request.answer()

    async def generate(self, body: bytes, admit: Callable[[int], None]) -> dict[str, Any]:
        request = parse(GenerateRequest, body, self.config.max_items)
        if request.best_of_n:
            raise BadRequest("best_of_n: a best-of-n request is answered by /v1/pipeline/candidates")
        admit(len(request.prompts))
        return {"prompts": request.prompts, "responses": await self._complete(request, 1)}

    async def candidates(self, body: bytes, admit: Callable[[int], None]) -> dict[str, Any]:
        n = self.config.pipeline_best_of_n
        if n is None:
            raise NotFound("best-of-n is not configured here (REWARD_GATEWAY_PIPELINE_BEST_OF_N)")
        request = parse(GenerateRequest, body, self.config.max_items)
        if request.best_of_n is False:
            raise BadRequest("best_of_n is false: send a score or generate-and-score request without it")
        admit(len(request.prompts) * n)
        responses = await self._complete(request, n)
        # vLLM numbers the choices of a list prompt prompt by prompt: index = prompt * n + j.
        return {
            "prompts": [prompt for prompt in request.prompts for _ in range(n)],
            "responses": responses,
            "groups": [group for group in range(len(request.prompts)) for _ in range(n)],
        }

    async def combine(self, body: bytes, admit: Callable[[int], None]) -> dict[str, Any]:
        answer = parse_json(body, self.config.max_items)
        items = self._ensemble_input(answer, admit)
        count = len(items.prompts)
        unexpected_steps(answer, self.combiner.steps | {INPUT_STEP, CRITIC_STEP, REFERENCE_STEP})
        parts = reward_parts(answer, self.combiner, count)
        if REFERENCE_STEP not in answer:
            raise step_error(REFERENCE_STEP, "its answer is missing from the Ensemble's")
        logprobs = rows_of_numbers(REFERENCE_STEP, "logprobs", answer[REFERENCE_STEP], count)
        values = rows_of_numbers(CRITIC_STEP, "values", answer[CRITIC_STEP], count) if CRITIC_STEP in answer else None
        combined = self.combiner.combine(parts, count)
        result: dict[str, Any] = {**items.answer(), "rewards": combined.rewards, "parts": combined.parts}
        if combined.normalised:
            result["normalised"] = combined.normalised
        if combined.failures:
            result["failures"] = combined.failure_list()
        if values is not None:
            result["values"] = values
        result["logprobs"] = logprobs
        return result

    async def select(self, body: bytes, admit: Callable[[int], None]) -> dict[str, Any]:
        answer = parse_json(body, self.config.max_items)
        items = self._ensemble_input(answer, admit)
        if items.groups is None:
            raise step_error(INPUT_STEP, "no groups: the best-of-n flow's input carries each candidate's prompt")
        unexpected_steps(answer, self.combiner.steps | {INPUT_STEP})
        combined = self.combiner.combine(reward_parts(answer, self.combiner, len(items.prompts)), len(items.prompts))
        result: dict[str, Any] = {"results": best_by_group(items.prompts, items.responses, items.groups, combined)}
        if combined.failures:
            result["failures"] = combined.failure_list()
        return result

    # reference

    async def logprobs(self, body: bytes, admit: Callable[[int], None]) -> dict[str, Any]:
        request = self._items(body, admit)
        texts = [prompt + response for prompt, response in zip(request.prompts, request.responses, strict=True)]
        call = {
            "model": self.config.model_name,
            "prompt": texts,
            # One token generated (vLLM's completions generate at least one); the echo
            # is the prompt's tokens with their log-probabilities (logprobs 0: the
            # token's own only), the generated token last.
            "max_tokens": 1,
            "echo": True,
            "logprobs": 0,
            "add_special_tokens": True,
        }
        max_answer = ECHO_ANSWER_BYTES_PER_BYTE_SENT * sum(len(text) for text in texts) + ANSWER_BASE_BYTES
        counts, answer = await self._with_prompt_tokens(request.prompts, COMPLETIONS_PATH, call, max_answer)
        logprobs, tokens = [], []
        for index, choice in enumerate(ordered_data(answer, len(texts), "choices")):
            echoed = _echoed(choice)
            start = counts[request.prompts[index]]
            if len(echoed) < start:
                raise bad_response(f"choice {index} echoes fewer tokens than its prompt has")
            response = echoed[start:]  # a token straddling the boundary is the prompt's, as in values
            if any(logprob is None for _, logprob in response):
                # Only a text's first token has none: an empty prompt and no BOS.
                raise BadRequest(
                    f"prompts.{index} is empty and the reference's tokenizer adds no BOS: "
                    "the response's first token has no log-probability"
                )
            logprobs.append([logprob for _, logprob in response])
            tokens.append([token for token, _ in response])
        return {"logprobs": logprobs, "tokens": tokens}

    # critic

    async def values(self, body: bytes, admit: Callable[[int], None]) -> dict[str, Any]:
        request = self._items(body, admit)
        texts = [prompt + response for prompt, response in zip(request.prompts, request.responses, strict=True)]
        # The special tokens vLLM adds to a completion's prompt, as the actor generated
        # from it and the /tokenize of the prompt counts them.
        call = {"model": self.config.model_name, "input": texts, "add_special_tokens": True}
        call.update(CRITIC_KIND.request_fields())
        counts, answer = await self._with_prompt_tokens(request.prompts, POOLING_PATH, call)
        values = []
        for index, row in enumerate(token_values(answer, len(texts))):
            start = counts[request.prompts[index]]
            if len(row) < start:
                raise bad_response(f"entry {index} has fewer values than its prompt has tokens")
            # The prompt's token count marks where the response starts: a token straddling
            # the boundary is counted with the prompt (see the module's docstring).
            values.append(row[start:])
        return {"values": values}

    # shared

    def _items(self, body: bytes, admit: Callable[[int], None]) -> PipelineItems:
        request = parse(PipelineItems, body, self.config.max_items)
        admit(len(request.prompts))
        return request

    def _ensemble_input(self, answer: Any, admit: Callable[[int], None]) -> PipelineItems:
        """The Ensemble's ``input`` part: the request as the actor's /v1/pipeline/input answered it."""
        if not isinstance(answer, dict):
            raise BadRequest("expected a JSON object: the Ensemble's answer, one entry per step")
        if INPUT_STEP not in answer:
            raise step_error(INPUT_STEP, "its answer is missing from the Ensemble's")
        try:
            items = validate(PipelineItems, answer[INPUT_STEP])
        except BadRequest as error:
            raise step_error(INPUT_STEP, error.message) from None
        admit(len(items.prompts))
        return items

    async def _complete(self, request: GenerateRequest, n: int) -> list[str]:
        """Completions of every prompt, ``n`` each, in vLLM's choice order (prompt by prompt)."""
        count = len(request.prompts) * n
        sampling = request.sampling()
        call = {"model": self.config.model_name, "prompt": request.prompts, "n": n, **sampling}
        tokens = sampling.get("max_tokens", UNSET_MAX_TOKENS_BOUND)
        max_answer = ANSWER_BASE_BYTES + count * (CHOICE_BYTES + tokens * GENERATED_BYTES_PER_TOKEN)
        answer = await self.client.post(COMPLETIONS_PATH, call, max_answer)
        texts = [choice.get("text") for choice in ordered_data(answer, count, "choices")]
        if not all(isinstance(text, str) for text in texts):
            raise bad_response("a choice has no text")
        return texts  # type: ignore[return-value]

    async def _with_prompt_tokens(
        self, prompts: list[str], path: str, body: dict[str, Any], max_answer_bytes: int | None = None
    ) -> tuple[dict[str, int], Any]:
        """vLLM's answer to ``body`` on ``path``, and how many tokens each distinct prompt is, with
        the special tokens vLLM adds (its BOS): all calls at once, in one task group (one nested in
        another would leave its cancelled calls in a reference cycle, reward_gateway.items.errors.forget)."""
        distinct = list(dict.fromkeys(prompts))
        calls = [self._prompt_tokens(prompt) for prompt in distinct]
        answers = await all_or_first_failure([*calls, self.client.post(path, body, max_answer_bytes)])
        return dict(zip(distinct, answers[:-1], strict=True)), answers[-1]

    async def _prompt_tokens(self, prompt: str) -> int:
        call = {"model": self.config.model_name, "prompt": prompt, "add_special_tokens": True}
        answer = await self.client.tokenize(call)
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise bad_response("a /tokenize answer without tokens")
        return len(tokens)


def _echoed(choice: dict[str, Any]) -> list[tuple[str, float | None]]:
    """An echoing choice's tokens and log-probabilities, the one generated token left out."""
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values) or not tokens:
        raise bad_response("a choice without its tokens' log-probabilities (echo with logprobs)")
    if not all(isinstance(token, str) for token in tokens):
        raise bad_response("a token is not a string")
    if not all(value is None or (isinstance(value, int | float) and not isinstance(value, bool)) for value in values):
        raise bad_response("a token's log-probability is not a number")
    pairs = [(token, None if value is None else float(value)) for token, value in zip(tokens, values, strict=True)]
    return pairs[:-1]
