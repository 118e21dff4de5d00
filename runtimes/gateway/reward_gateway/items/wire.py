"""Request bodies of each route, validated at the door.

Unknown fields are rejected rather than ignored: a misspelt field that silently
changes what gets scored is exactly the bug this gateway exists to prevent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from reward_gateway.items.errors import BadRequest

RequestT = TypeVar("RequestT", bound=BaseModel)

# The deepest a request may nest: items[].messages[].content is four levels, and
# vLLM's own /classify fields a few more. Bounded before validation, as is the
# length of every top-level list, so a hostile body costs the parse and one walk,
# not a validation (and an error message) per element.
MAX_DEPTH = 32
MAX_PROBLEMS = 20  # validation problems named in one answer


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Message(_Strict):
    """An OpenAI-style chat message, as trainers send them (TRL's tool and reasoning turns included)."""

    role: str
    content: str | list[Any] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None

    @field_validator("content", mode="after")
    @classmethod
    def _text_parts_joined(cls, content: str | list[Any] | None) -> str | None:
        """OpenAI content parts: text parts joined with newlines, as vLLM 0.32 joins them
        (renderers/chat_utils.py); anything but text cannot be scored here."""
        if not isinstance(content, list):
            return content
        texts = []
        for index, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text":
                raise ValueError(
                    f"part {index} is {kind or type(part).__name__!r}: this reward model scores text parts only"
                )
            if not isinstance(part.get("text"), str) or set(part) != {"type", "text"}:
                raise ValueError(f'part {index}: a text part is {{"type": "text", "text": <string>}}')
            texts.append(part["text"])
        return "\n".join(texts)

    @model_validator(mode="after")
    def _has_content(self) -> Message:
        # Only an assistant turn that calls tools may come without content (as in
        # OpenAI's format); elsewhere a missing content is a mistake worth a 400.
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content: field required (only an assistant message with tool_calls may omit it)")
        return self

    def for_template(self) -> dict[str, Any]:
        """The message as vLLM 0.32 hands it to a chat template (renderers/chat_utils.py).

        Text parts joined (on validation) and a missing content as "", tool calls
        and reasoning passed on (reasoning under both of its names), so a
        template rendered here and one rendered by vLLM see the same message.
        """
        message: dict[str, Any] = {"role": self.role, "content": self.content or ""}
        if self.tool_calls:
            message["tool_calls"] = [_with_parsed_arguments(call) for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            message["name"] = self.name
        reasoning = self.reasoning if self.reasoning is not None else self.reasoning_content
        if reasoning is not None:
            message["reasoning"] = message["reasoning_content"] = reasoning
        return message


def _with_parsed_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call with its JSON-string arguments as an object, as templates expect them (and vLLM
    hands them over: an unparsable or non-object string becomes {})."""
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = orjson.loads(function["arguments"]) if function["arguments"] else {}
    except orjson.JSONDecodeError:
        arguments = {}
    return {**call, "function": {**function, "arguments": arguments if isinstance(arguments, dict) else {}}}


class RewardItem(_Strict):
    """One thing to score: a prompt and its response (or its steps), a conversation, or finished text."""

    prompt: str | None = None
    response: str | None = None
    steps: list[str] | None = None
    messages: list[Message] | None = None
    # Text scored as given, with no template and no special tokens added: how
    # TRL's own reward model scores a standard (non-chat) dataset's prompt + completion. With a prompt
    # (which the text starts with), a judge reads the rest as the response; a score head, the text.
    text: str | None = None
    group: str | int | None = None
    # The answer the response is judged against, read by a judge's prompt template (reward_gateway.judge.scorer);
    # a score head scores the prompt and response alone, as trainers send the same items to either.
    reference: str | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> RewardItem:
        shaped = self.prompt is not None or self.response is not None or self.steps is not None
        if self.text is not None:
            if self.response is not None or self.steps is not None or self.messages is not None:
                raise ValueError(
                    "give text alone (or with the prompt it starts with), not with messages, response or steps"
                )
            if self.prompt is not None and not self.text.startswith(self.prompt):
                raise ValueError("with text, prompt is where the text starts: the text must start with it")
        elif self.messages is not None:
            if shaped:
                raise ValueError("give either messages or prompt with response/steps, not both")
            if not self.messages:
                raise ValueError("messages must not be empty")
        elif self.prompt is None:
            raise ValueError("each item needs prompt and response (or steps), messages, or text")
        elif (self.response is None) == (self.steps is None):
            raise ValueError("give exactly one of response or steps with a prompt")
        return self


class RewardsRequest(_Strict):
    """POST /v1/rewards, this gateway's own contract."""

    model: str | None = None
    items: list[RewardItem]


class PredictRequest(_Strict):
    """KServe v1 predict: the same items, under `instances`."""

    instances: list[RewardItem]


class OpenRLHFRequest(_Strict):
    """OpenRLHF's remote reward model request (its /get_reward)."""

    query: list[str]
    prompts: list[str] | None = None
    labels: list[Any] | None = None


class PipelineItems(_Strict):
    """A score request of an RLHFPipeline's graph (reward_gateway.pipeline.routes): prompts and their
    responses, item by item; ``groups`` (the best-of-n flow's) the prompt each item answers."""

    prompts: list[str]
    responses: list[str]
    groups: list[int] | None = None

    @model_validator(mode="after")
    def _items(self) -> PipelineItems:
        if not self.prompts:
            raise ValueError("prompts must not be empty")
        if len(self.responses) != len(self.prompts):
            raise ValueError(f"responses has {len(self.responses)} entries but prompts has {len(self.prompts)}")
        if self.groups is not None and len(self.groups) != len(self.prompts):
            raise ValueError(f"groups has {len(self.groups)} entries but prompts has {len(self.prompts)}")
        return self

    def answer(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"prompts": self.prompts, "responses": self.responses}
        if self.groups is not None:
            answer["groups"] = self.groups
        return answer


class GenerateRequest(_Strict):
    """The generate-and-score and best-of-n flows' request, as the actor's gateway gets it:
    prompts and vLLM's sampling settings (unset: vLLM's defaults)."""

    prompts: list[str]
    best_of_n: bool | None = None  # the best-of-n flow's marker (the graph's Switch reads it)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None

    @field_validator("temperature", "top_p", mode="before")
    @classmethod
    def _int_is_a_number(cls, value: Any) -> Any:
        # JSON has one kind of number: a temperature of 1 is 1.0 (strict mode would refuse the int).
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _prompts(self) -> GenerateRequest:
        if not self.prompts:
            raise ValueError("prompts must not be empty")
        return self

    def sampling(self) -> dict[str, Any]:
        """The sampling settings given, as vLLM's completions API takes them."""
        fields = ("max_tokens", "temperature", "top_p", "seed")
        return {name: getattr(self, name) for name in fields if getattr(self, name) is not None}


class ClassifyRequest(BaseModel):
    """verl's /classify call; passed through to vLLM, so vLLM's own fields are allowed."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    input: str | list[str]


@dataclass(frozen=True)
class Judged:
    """What a judge reads of an item (reward_gateway.judge.scorer): the conversation before the response, the
    response, and the reference answer where the item has one."""

    messages: list[dict[str, Any]]
    response: str
    reference: str | None = None

    @property
    def prompt(self) -> str:
        """The prompt as text: the last user message's content (the conversation is in ``messages``)."""
        users = [message for message in self.messages if message.get("role") == "user"]
        return str(users[-1].get("content") or "") if users else ""


@dataclass(frozen=True)
class ScoringItem:
    """What the scorer sends for one item: a conversation to template, or finished text.

    Finished text goes to vLLM exactly as given, with no special tokens added:
    OpenRLHF's query already holds its template's BOS (its serve_rm.py tokenizes
    with add_special_tokens=False), and so does text a client rendered itself.
    ``judged``: the item as a judge reads it, where it has a response apart from its prompt (None: finished
    text with no prompt to split it at, a process model's steps, a conversation that does not end with the
    assistant's turn).
    """

    conversation: list[dict[str, Any]] | None = None
    text: str | None = None
    group: str | None = None
    judged: Judged | None = None


def parse_json(body: bytes, max_items: int) -> Any:
    """The body's JSON, with its shape bounded (see check_shape)."""
    if not body:
        raise BadRequest("the request body is empty; expected a JSON object")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:  # invalid UTF-8 included
        raise BadRequest(f"the request body is not valid JSON: {error}") from None
    check_shape(data, max_items)
    return data


def check_shape(data: Any, max_items: int) -> None:
    """No top-level list longer than max_items, nothing nested deeper than MAX_DEPTH."""
    if isinstance(data, dict):
        for name, value in data.items():
            if isinstance(value, list) and len(value) > max_items:
                raise BadRequest(f"{name}: {len(value)} items in one request; at most {max_items} are allowed")
    if not isinstance(data, dict | list):
        return
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise BadRequest(f"the request nests deeper than {MAX_DEPTH} levels")
        for child in value.values() if isinstance(value, dict) else value:
            if isinstance(child, dict | list):
                pending.append((child, depth + 1))


def parse(model: type[RequestT], body: bytes, max_items: int) -> RequestT:
    return validate(model, parse_json(body, max_items))


def validate(model: type[RequestT], data: Any) -> RequestT:
    if not isinstance(data, dict):
        raise BadRequest("expected a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise BadRequest(describe(error)) from None


def describe(error: ValidationError) -> str:
    """One line per problem, each naming where it is, e.g. `items.2.prompt: field required`."""
    lines = []
    problems = error.errors(include_url=False)
    for problem in problems[:MAX_PROBLEMS]:
        where = ".".join(str(part) for part in problem["loc"]) or "body"
        message = "unknown field" if problem["type"] == "extra_forbidden" else problem["msg"]
        lines.append(f"{where}: {message}")
    if len(problems) > MAX_PROBLEMS:
        lines.append(f"and {len(problems) - MAX_PROBLEMS} more")
    return "; ".join(lines)


def conversation_of(item: RewardItem, step_tag: str) -> list[dict[str, Any]]:
    if item.messages is not None:
        return [message.for_template() for message in item.messages]
    # A process reward model scores each step at the tag that ends it.
    steps = item.steps
    response = "".join(step + step_tag for step in steps) if steps is not None else item.response or ""
    return [{"role": "user", "content": item.prompt or ""}, {"role": "assistant", "content": response}]


def scoring_items(items: list[RewardItem], step_tag: str) -> list[ScoringItem]:
    return [scoring_item(item, step_tag) for item in items]


def scoring_item(item: RewardItem, step_tag: str) -> ScoringItem:
    group = None if item.group is None else str(item.group)
    if item.text is not None:
        return ScoringItem(text=item.text, group=group, judged=judged_text(item.text, item.prompt, item.reference))
    conversation = conversation_of(item, step_tag)
    # A judge reads a response, not a process model's tagged steps.
    judged = judged_conversation(conversation, item.reference) if item.steps is None else None
    return ScoringItem(conversation=conversation, group=group, judged=judged)


def judged_conversation(conversation: list[dict[str, Any]], reference: str | None) -> Judged | None:
    """A conversation as a judge reads it: its last turn, the assistant's, is the response."""
    if len(conversation) < 2 or conversation[-1].get("role") != "assistant":
        return None
    return Judged(conversation[:-1], str(conversation[-1].get("content") or ""), reference)


def reference_text(label: Any) -> str | None:
    """An OpenRLHF label as a judge's reference answer: its text (a label that is not text, as JSON)."""
    if label is None or isinstance(label, str):
        return label
    return orjson.dumps(label).decode()


def judged_text(text: str, prompt: str | None, reference: str | None) -> Judged | None:
    """Finished text (OpenRLHF's query: its prompt and response, templated by the policy) as a judge reads it:
    the response is what follows the prompt, which the trainer sends apart (OpenRLHF's ``prompts``)."""
    if prompt is None or not text.startswith(prompt):
        return None
    return Judged([{"role": "user", "content": prompt}], text[len(prompt) :], reference)
