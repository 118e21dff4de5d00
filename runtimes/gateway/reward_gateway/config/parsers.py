"""How a setting's text becomes a value: one parser per kind of value, each saying what it accepts.

A parser refuses with `Invalid` (what was expected, and where in the value); reward_gateway.config.settings
names the variable. Each carries the words the README's table uses for what it accepts, and its unit.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# The graph's step of a reward model (the operator's render/pipeline_gateway.reward_step).
REWARD_STEP_PREFIX = "reward-"
NORMALISATIONS = ("none", "running")
# A header name is an HTTP token (RFC 9110): what a client can send and a proxy passes on.
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")


class Invalid(ValueError):
    """A parser's refusal: what was expected, and where in the value (``at``) when not the value as a whole."""

    def __init__(self, message: str, at: str | None = None):
        super().__init__(message)
        self.message = message
        self.at = at


@dataclass(frozen=True)
class Parser(Generic[T]):
    """How a variable's text becomes a value; ``accepts`` and ``unit`` are what the README says of it."""

    read: Callable[[str], T]
    accepts: str
    unit: str = ""


def text() -> Parser[str]:
    return Parser(lambda raw: raw, "text")


def choice(*options: str) -> Parser[str]:
    def read(raw: str) -> str:
        value = raw.lower()
        if value not in options:
            raise Invalid(f"expected one of {', '.join(options)}")
        return value

    return Parser(read, ", ".join(f"`{option}`" for option in options))


def boolean() -> Parser[bool]:
    options = choice("true", "false")
    return Parser(lambda raw: options.read(raw) == "true", options.accepts)


def integer(minimum: int, maximum: int | None = None, unit: str = "") -> Parser[int]:
    def read(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise Invalid("expected an integer") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            raise Invalid(f"expected {bound}", at=f"={value}")
        return value

    bounds = f"{minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
    return Parser(read, f"integer, {bounds}", unit)


def number(allow_zero: bool = False, unit: str = "", scale: float = 1.0) -> Parser[float]:
    """A finite number, positive (or zero where allowed); ``scale`` converts it to the config's unit."""
    words = {"s": " of seconds", "ms": " of milliseconds"}.get(unit, "")

    def read(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise Invalid(f"expected a number{words}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise Invalid(f"expected a positive number{words}")
        return value * scale

    return Parser(read, "number, at least 0" if allow_zero else "number, above 0", unit)


def seconds(allow_zero: bool = False) -> Parser[float]:
    return number(allow_zero, "s")


def milliseconds(allow_zero: bool = False) -> Parser[float]:
    """Milliseconds in the environment, seconds in the config."""
    return number(allow_zero, "ms", scale=1 / 1000)


def url() -> Parser[str]:
    def read(raw: str) -> str:
        value = raw.rstrip("/")
        if "://" not in value:
            # KServe hands transformers a bare host (or host:port) for the predictor.
            value = "http://" + value
        if not value.startswith(("http://", "https://")):
            raise Invalid("expected an http:// or https:// URL")
        return value

    return Parser(read, "URL, or `host[:port]` (then `http://`)")


def ip_address() -> Parser[str]:
    def read(raw: str) -> str:
        try:
            ipaddress.ip_address(raw)
        except ValueError:
            raise Invalid("expected an IP address") from None
        return raw

    return Parser(read, "IP address")


def path() -> Parser[Path]:
    return Parser(Path, "path")


def header_name() -> Parser[str]:
    """An HTTP header name, in lower case (as ASGI hands headers over)."""

    def read(raw: str) -> str:
        value = raw.lower()
        if not set(value) <= _TOKEN_CHARS:
            raise Invalid("expected an HTTP header name")
        return value

    return Parser(read, "HTTP header name")


@dataclass(frozen=True)
class PipelineReward:
    """One reward model in the actor's combined reward (REWARD_GATEWAY_PIPELINE_REWARDS)."""

    step: str  # the graph's step, reward-<name>: the key of its part in the Ensemble's answer
    weight: float
    normalise: str = "none"  # or "running" (reward_gateway.pipeline.combine)

    @property
    def name(self) -> str:
        """The reward model's name, the key of its part in the combined answer."""
        return self.step.removeprefix(REWARD_STEP_PREFIX)


def _json(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise Invalid(f"not valid JSON ({error})", at="") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def pipeline_rewards() -> Parser[tuple[PipelineReward, ...]]:
    def read(raw: str) -> tuple[PipelineReward, ...]:
        entries = _json(raw)
        if not isinstance(entries, list) or not entries:
            raise Invalid("expected a non-empty JSON list", at="")
        rewards: list[PipelineReward] = []
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not set(entry) <= {"step", "weight", "normalise"}:
                raise Invalid('expected {"step", "weight", "normalise"}', at=f"[{index}]")
            step, weight, normalise = entry.get("step"), entry.get("weight"), entry.get("normalise", "none")
            if not isinstance(step, str) or not step.startswith(REWARD_STEP_PREFIX) or step == REWARD_STEP_PREFIX:
                raise Invalid(f"expected {REWARD_STEP_PREFIX}<reward model>", at=f"[{index}].step={step!r}")
            if not _is_number(weight) or not math.isfinite(weight):
                raise Invalid("expected a number", at=f"[{index}].weight={weight!r}")
            if normalise not in NORMALISATIONS:
                raise Invalid(f"expected one of {', '.join(NORMALISATIONS)}", at=f"[{index}].normalise={normalise!r}")
            if any(reward.step == step for reward in rewards):
                raise Invalid(f"step {step!r} is listed twice", at="")
            rewards.append(PipelineReward(step, float(weight), normalise))
        return tuple(rewards)

    return Parser(read, 'JSON list of `{"step", "weight", "normalise"}`')


def client_weights() -> Parser[dict[str, float]]:
    def read(raw: str) -> dict[str, float]:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as error:
            raise Invalid(f"not JSON ({error})", at="") from None
        if not isinstance(parsed, dict) or not all(
            isinstance(name, str) and name and _is_number(weight) and weight > 0 for name, weight in parsed.items()
        ):
            raise Invalid("expected a JSON object of client names to positive numbers", at="")
        return {name: float(weight) for name, weight in parsed.items()}

    return Parser(read, 'JSON `{"client": weight}`')
