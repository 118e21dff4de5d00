"""A judge's settings (REWARD_GATEWAY_JUDGE): its prompt template and how its verdict becomes a reward.

The operator renders the RewardModel's ``spec.judge`` into the variable as JSON, unchanged (the CRD's
field names), so the schema's description of each field is also the gateway's:

- ``prompt``: a Jinja2 template of the judge's user message, over ``prompt`` (the item's prompt as
  text), ``messages`` (the conversation before the response), ``response`` and ``reference`` (the
  item's reference answer, or None); ``system``: an optional system message. vLLM applies the judge
  model's own chat template to them, once (reward_gateway.judge.scorer).
- the verdict, one of:
  - ``labels`` (``[{"token": "Yes", "value": 1}, ...]``): the judge's next-token probabilities of the
    labels after the prompt, renormalised over the labels; the reward is the value they expect. The
    label rule (docs/judges.md#the-label-rule) needs the judge's tokenizer, which only vLLM knows, so
    reward_gateway.judge.scorer checks it at start;
  - ``structured``: generation at temperature 0 under vLLM's structured output, either ``jsonSchema``
    with the ``field`` read as the score, or ``choices`` (``[{"text", "value"}]``), within
    ``minimum``/``maximum`` where set, in at most ``maxTokens`` tokens.

Refused here, at start, with a message naming the field: anything the schema would have refused (the
gateway may be run without the operator), a template that does not compile, and one that names a
variable it is never given (a typo would otherwise fail every item).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateError, meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

from reward_gateway.config.parsers import Invalid, Parser

# What the prompt template is given, for every item.
TEMPLATE_VARIABLES = ("prompt", "messages", "response", "reference")
# vLLM returns the log-probabilities of at most this many chosen tokens (MAX_LOGPROB_TOKEN_IDS, 0.32).
MAX_LABELS = 128
DEFAULT_MAX_TOKENS = 64


@dataclass(frozen=True)
class Label:
    """A label the judge may answer (a token, or a choice's text) and the reward it stands for."""

    text: str
    value: float


@dataclass(frozen=True)
class Structured:
    json_schema: dict[str, Any] | None  # with ``field``; else ``choices``
    field: str | None
    choices: tuple[Label, ...] | None
    minimum: float | None
    maximum: float | None
    max_tokens: int


@dataclass(frozen=True)
class JudgeConfig:
    prompt: str
    system: str | None
    labels: tuple[Label, ...] | None  # label probabilities; else ``structured``
    structured: Structured | None
    # A digest of the whole setting: a new template or verdict is a new judge, named in every answer's identity.
    digest: str

    @property
    def mode(self) -> str:
        return "labels" if self.labels is not None else "structured"


def judge() -> Parser[JudgeConfig]:
    """The setting's parser: the README's words for what it takes."""
    return Parser(parse_judge, "JSON: `spec.judge` (`prompt`, `system`, `labels` or `structured`)")


def parse_judge(raw: str) -> JudgeConfig:
    """REWARD_GATEWAY_JUDGE's JSON as a JudgeConfig, or Invalid naming the field."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        raise Invalid(f"not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise Invalid("expected a JSON object (spec.judge)")
    _only(data, {"prompt", "system", "labels", "structured"}, "")
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise Invalid("a template (text) is required", ".prompt")
    check_template(prompt)
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise Invalid("expected text", ".system")
    if ("labels" in data) == ("structured" in data):
        raise Invalid("give exactly one verdict: labels (label probabilities) or structured (a structured verdict)")
    labels = _labels(data["labels"], ".labels", "token") if "labels" in data else None
    structured = _structured(data["structured"]) if "structured" in data else None
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return JudgeConfig(prompt, system, labels, structured, digest)


def environment() -> ImmutableSandboxedEnvironment:
    """The prompt template's Jinja2 environment: sandboxed, a missing variable an error (never silently empty)."""
    from jinja2 import StrictUndefined

    return ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)


def check_template(source: str) -> None:
    env = environment()
    try:
        parsed = env.parse(source)
    except TemplateError as error:
        raise Invalid(f"the template does not compile: {error}", ".prompt") from None
    unknown = sorted(meta.find_undeclared_variables(parsed) - set(TEMPLATE_VARIABLES) - set(env.globals))
    if unknown:
        raise Invalid(
            f"the template names {', '.join(unknown)}, which it is never given; it is given "
            + ", ".join(TEMPLATE_VARIABLES),
            ".prompt",
        )


def _only(data: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r}", where or None)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Invalid("expected a finite number", where)
    return float(value)


def _labels(entries: Any, where: str, text_field: str) -> tuple[Label, ...]:
    if not isinstance(entries, list) or len(entries) < 2:
        raise Invalid("expected at least two labels", where)
    if len(entries) > MAX_LABELS:
        raise Invalid(f"at most {MAX_LABELS} labels (vLLM returns no more chosen tokens' probabilities)", where)
    labels: list[Label] = []
    for index, entry in enumerate(entries):
        at = f"{where}[{index}]"
        if not isinstance(entry, dict):
            raise Invalid(f'expected {{"{text_field}": <text>, "value": <number>}}', at)
        _only(entry, {text_field, "value"}, at)
        text = entry.get(text_field)
        if not isinstance(text, str) or not text:
            raise Invalid("expected non-empty text", f"{at}.{text_field}")
        labels.append(Label(text, _number(entry.get("value"), f"{at}.value")))
    seen: set[str] = set()
    for label in labels:
        if label.text in seen:
            raise Invalid(f"{label.text!r} is listed twice", where)
        seen.add(label.text)
    return tuple(labels)


def _structured(data: Any) -> Structured:
    where = ".structured"
    if not isinstance(data, dict):
        raise Invalid("expected an object", where)
    _only(data, {"jsonSchema", "field", "choices", "minimum", "maximum", "maxTokens"}, where)
    if ("jsonSchema" in data) == ("choices" in data):
        raise Invalid("give exactly one of jsonSchema (with field) or choices", where)
    schema, field, choices = data.get("jsonSchema"), data.get("field"), None
    if schema is not None:
        if not isinstance(schema, dict):
            raise Invalid("expected a JSON schema (an object)", f"{where}.jsonSchema")
        if not isinstance(field, str) or not field:
            raise Invalid("the field read as the score is required with jsonSchema", f"{where}.field")
    else:
        if field is not None:
            raise Invalid("a field is read from a jsonSchema's object only; choices carry their values", where)
        choices = _labels(data["choices"], f"{where}.choices", "text")
    minimum = _number(data["minimum"], f"{where}.minimum") if "minimum" in data else None
    maximum = _number(data["maximum"], f"{where}.maximum") if "maximum" in data else None
    if minimum is not None and maximum is not None and minimum > maximum:
        raise Invalid(f"minimum {minimum:g} is above maximum {maximum:g}", where)
    max_tokens = data.get("maxTokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise Invalid("expected a whole number of tokens, at least 1", f"{where}.maxTokens")
    return Structured(schema, field, choices, minimum, maximum, max_tokens)
