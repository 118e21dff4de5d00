"""The gateway's configuration, read once from environment variables.

The operator renders these into the transformer container; every name, meaning
and default is listed in runtimes/gateway/README.md. Bad values stop the process
at start with a message naming the variable, instead of surfacing later as wrong
rewards. The arguments KServe appends to a transformer's command fill in what
the environment leaves unset (see KServeArgs).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "REWARD_GATEWAY_"
MODEL_KINDS = ("sequence", "token", "process")
TEMPLATE_MODES = ("upstream", "gateway")
STEP_AGGREGATES = ("min", "last", "mean", "product")
CANARY_MODES = ("shadow", "split")
CANARY_STICKY = ("group", "client")
CANARY_PREFIX = "CANARY_"
SCALER_METRICS = ("items", "requests")
# A gateway in an RLHFPipeline's role (reward_gateway.pipeline) instead of a RewardModel's.
PIPELINE_ROLES = ("actor", "reference", "critic")
NORMALISATIONS = ("none", "running")
# The graph's step of a reward model (the operator's render/pipeline_gateway.reward_step).
REWARD_STEP_PREFIX = "reward-"
# A RewardModel's settings: a role's gateway scores nothing itself, so one of them set
# there is a mistake in what rendered it, refused at start rather than ignored.
REWARD_MODEL_ONLY = (
    "MODEL_KIND",
    "STEP_TAG",
    "STEP_AGGREGATE",
    "REWARD_TOKEN_ID",
    "CHAT_TEMPLATE_MODE",
    "CHAT_TEMPLATE",
    "CHAT_TEMPLATE_FILE",
    "BOS_TOKEN",
    "EOS_TOKEN",
    "TRUNCATE_PROMPT_TOKENS",
)
# A header name is an HTTP token (RFC 9110): what a client can send and a proxy passes on.
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")

MIB = 1024 * 1024
# What the process takes besides the requests it holds: about 55 MiB at start,
# plus connections, metrics, vLLM's answers of a few numbers per text in flight,
# and what the allocator keeps after a burst. The rest of the container's memory
# limit is the requests' budget (reward_gateway.asgi).
PROCESS_RESERVE_BYTES = 256 * MIB
# Without a known limit (a local run): the budget of the operator's default 1 GiB.
DEFAULT_MEMORY_LIMIT_BYTES = 1024 * MIB


class ConfigError(ValueError):
    """A variable is missing or holds a value the gateway cannot use."""


@dataclass(frozen=True)
class ChatTemplate:
    """A jinja chat template plus the special tokens it refers to."""

    source: str
    bos_token: str | None = None
    eos_token: str | None = None


@dataclass(frozen=True)
class KServeArgs:
    """What KServe appends to a transformer container's args: --model_name <isvc
    name> --predictor_host <isvc>-predictor.<namespace> --http_port 8080.

    They stand in for REWARD_GATEWAY_MODEL_NAME, _UPSTREAM_URL and _PORT where
    those are unset; where both are given, the environment wins.
    """

    model_name: str | None = None
    predictor_host: str | None = None
    http_port: int | None = None
    workers: int | None = None  # set with containerConcurrency; the gateway is one process regardless


def parse_kserve_args(argv: list[str]) -> tuple[KServeArgs, list[str]]:
    """KServe's transformer arguments, and the arguments the gateway does not take."""
    # No abbreviations: an unknown --model must not be read as --model_name.
    parser = argparse.ArgumentParser(prog="python -m reward_gateway", allow_abbrev=False)
    parser.add_argument("--model_name", help="the InferenceService's name (REWARD_GATEWAY_MODEL_NAME wins)")
    parser.add_argument("--predictor_host", help="the predictor's host (REWARD_GATEWAY_UPSTREAM_URL wins)")
    parser.add_argument("--http_port", type=int, help="listen port (REWARD_GATEWAY_PORT wins)")
    parser.add_argument("--workers", type=int, help="ignored: one process; scale with replicas")
    known, unknown = parser.parse_known_args(argv)
    return KServeArgs(known.model_name, known.predictor_host, known.http_port, known.workers), unknown


@dataclass(frozen=True)
class ModelIdentity:
    """What an answer says about the model that scored it (reward_gateway.identity)."""

    revision: str | None = None  # the storage URI it was loaded from
    digest: str | None = None  # a content digest, where the storage path names one
    generation: int | None = None  # the RewardModel's metadata.generation that rendered this gateway
    # Where the generation is followed from instead, while the gateway runs (reward_gateway.generation).
    generation_file: Path | None = None


@dataclass(frozen=True)
class CanaryConfig:
    """A candidate reward model rolled out beside the stable one (reward_gateway.canary)."""

    upstream_url: str  # the candidate's vLLM
    model_name: str  # its --served-model-name, sent in each call
    name: str  # its name in metrics, /canary and the `model` label of its own series
    mode: str = "shadow"
    percent: int = 0  # split: the share of requests the candidate answers (fixed: REWARD_GATEWAY_CANARY_PERCENT)
    # Where the share is followed from instead, while the gateway runs (reward_gateway.share); percent is then 0.
    percent_file: Path | None = None
    sticky: str = "group"
    client_header: str = "x-reward-client"  # lower case, as ASGI hands headers over
    shadow_wait_s: float = 2.0
    half_life_s: float | None = 600.0  # None: the window keeps everything since start
    # The candidate's own template where it has one; None: the stable model's.
    chat_template: ChatTemplate | None = None
    identity: ModelIdentity = ModelIdentity()


@dataclass(frozen=True)
class ScalerConfig:
    """KEDA's external scaler, served by the gateway (reward_gateway.scaler)."""

    port: int
    # What GetMetrics counts, in flight on this gateway (held ones included):
    # scored items (what vLLM queues and runs) or requests.
    metric: str = "items"
    target: float = 256.0  # of that count per predictor replica (the HPA's AverageValue)
    # IsActive stays true this long after the last request ended, so that a burst
    # between two of KEDA's polls still counts, and the cooldown starts after it.
    active_s: float = 30.0
    # A name whose addresses are all the gateway's replicas (a headless Service);
    # each replica then answers for all of them. None: this replica alone.
    peers: str | None = None
    peer_timeout_s: float = 1.0

    @property
    def metric_name(self) -> str:
        """The metric's name in GetMetricSpec (KEDA's HPA sees it as s<trigger>-<name>)."""
        return f"inflight-{self.metric}"


@dataclass(frozen=True)
class CoalesceConfig:
    """Concurrent scoring calls merged into fewer vLLM calls, and shared fairly (reward_gateway.coalesce)."""

    enabled: bool = False  # off until its effect on held requests and memory is measured (README)
    max_wait_s: float = 0.005  # the longest a call waits for others while vLLM is busy (never while idle)
    max_items: int = 64  # texts per merged call
    max_batches: int = 4  # merged calls in flight at once; the rest queue in the gateway
    # While clients share vLLM, a merged call no bigger than vLLM answers in this time at its measured pace
    # (0: no bound by time), which bounds what a light client waits behind a flood (reward_gateway.coalesce)
    max_call_s: float = 0.05
    fair_share: bool = True  # the queue in weighted fair order between clients (else arrival order)
    weights: Mapping[str, float] = field(default_factory=dict)  # by client; others weigh default_weight
    default_weight: float = 1.0


@dataclass(frozen=True)
class PipelineReward:
    """One reward model in the actor's combined reward (REWARD_GATEWAY_PIPELINE_REWARDS)."""

    step: str  # the graph's step, reward-<name>: the key of its part in the Ensemble's answer
    weight: float
    normalise: str = "none"  # or "running" (reward_gateway.combine)

    @property
    def name(self) -> str:
        """The reward model's name, the key of its part in the combined answer."""
        return self.step.removeprefix(REWARD_STEP_PREFIX)


@dataclass(frozen=True)
class GatewayConfig:
    upstream_url: str
    model_name: str
    model_kind: str = "sequence"
    step_tag: str = "<extra_0>"
    step_aggregate: str = "min"
    # A token model whose own scorer appends a reward token to the templated conversation and reads
    # the score there (InternLM2-Reward's get_score, config.json reward_token_id): its id. None: the
    # conversation is scored as templated (Qwen2.5-Math-RM's scorer appends nothing).
    reward_token_id: int | None = None
    template_mode: str = "upstream"
    chat_template: ChatTemplate | None = None
    max_concurrency: int = 64
    request_timeout_s: float = 180.0
    scale_from_zero_timeout_s: float = 150.0
    # After SIGTERM, how long the gateway keeps answering before it stops listening (reward_gateway.server).
    drain_s: float = 5.0
    # Requests held at once while the predictor is away (reward_gateway.load).
    max_held_requests: int = 1024
    max_items: int = 8192
    # What the requests held at once may cost (reward_gateway.asgi).
    memory_budget_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES - PROCESS_RESERVE_BYTES
    truncate_prompt_tokens: int | None = None
    auth_token_file: Path | None = None
    port: int = 8080
    # The one address the HTTP port and the scaler's listen on; empty: all interfaces (in a pod).
    listen_address: str = ""
    access_log: bool = False
    # KServe's name for the model (--model_name, the InferenceService's name)
    # where it differs from model_name: the v1 routes answer to it as well,
    # as KServe's InferenceGraph calls /v1/models/<isvc name>:predict.
    isvc_name: str | None = None
    canary: CanaryConfig | None = None
    scaler: ScalerConfig | None = None
    # None: a RewardModel's gateway. Otherwise the RLHFPipeline role whose routes it
    # serves (reward_gateway.pipeline); the rewards and best-of-n are the actor's.
    pipeline_role: str | None = None
    pipeline_rewards: tuple[PipelineReward, ...] = ()
    pipeline_best_of_n: int | None = None
    coalesce: CoalesceConfig = CoalesceConfig()
    identity: ModelIdentity = ModelIdentity()

    @property
    def v1_names(self) -> tuple[str, ...]:
        """The names the KServe v1 routes (readiness, listing, predict) answer to."""
        return (self.model_name, self.isvc_name) if self.isvc_name else (self.model_name,)


def load_config(env: Mapping[str, str] | None = None, kserve: KServeArgs | None = None) -> GatewayConfig:
    env = os.environ if env is None else env
    kserve = kserve or KServeArgs()
    reader = _Reader(env)
    role = reader.text("PIPELINE_ROLE", "").lower() or None
    if role is not None:
        reader.choice("PIPELINE_ROLE", PIPELINE_ROLES, "")
        stray = sorted(PREFIX + name for name in REWARD_MODEL_ONLY if reader.text(name, ""))
        if stray:
            raise ConfigError(f"{', '.join(stray)}: a RewardModel's setting, not used in pipeline role {role}")
    mode = reader.choice("CHAT_TEMPLATE_MODE", TEMPLATE_MODES, "upstream")
    template = _load_template(reader)
    if mode == "gateway" and template is None:
        raise ConfigError(
            f"{PREFIX}CHAT_TEMPLATE_MODE=gateway needs {PREFIX}CHAT_TEMPLATE_FILE or {PREFIX}CHAT_TEMPLATE"
        )
    token_file = reader.text("AUTH_TOKEN_FILE", "")
    truncate = reader.text("TRUNCATE_PROMPT_TOKENS", "")
    reward_token = reader.text("REWARD_TOKEN_ID", "")
    model_name = reader.required("MODEL_NAME", kserve.model_name, "--model_name")
    config = GatewayConfig(
        upstream_url=reader.url("UPSTREAM_URL", kserve.predictor_host, "--predictor_host"),
        model_name=model_name,
        model_kind=reader.choice("MODEL_KIND", MODEL_KINDS, "sequence"),
        step_tag=reader.text("STEP_TAG", "<extra_0>"),
        step_aggregate=reader.choice("STEP_AGGREGATE", STEP_AGGREGATES, "min"),
        reward_token_id=reader.integer("REWARD_TOKEN_ID", 0, minimum=0) if reward_token else None,
        template_mode=mode,
        chat_template=template,
        max_concurrency=reader.integer("MAX_CONCURRENCY", 64, minimum=1),
        request_timeout_s=reader.seconds("REQUEST_TIMEOUT_SECONDS", 180.0),
        scale_from_zero_timeout_s=reader.seconds("SCALE_FROM_ZERO_TIMEOUT_SECONDS", 150.0, allow_zero=True),
        drain_s=reader.seconds("DRAIN_SECONDS", 5.0, allow_zero=True),
        max_held_requests=reader.integer("MAX_HELD_REQUESTS", 1024, minimum=1),
        max_items=reader.integer("MAX_ITEMS", 8192, minimum=1),
        # The container's memory limit, from the downward API (resourceFieldRef limits.memory).
        memory_budget_bytes=reader.integer(
            "MEMORY_LIMIT_BYTES", DEFAULT_MEMORY_LIMIT_BYTES, minimum=2 * PROCESS_RESERVE_BYTES
        )
        - PROCESS_RESERVE_BYTES,
        truncate_prompt_tokens=reader.integer("TRUNCATE_PROMPT_TOKENS", 0, minimum=-1) if truncate else None,
        auth_token_file=Path(token_file) if token_file else None,
        port=reader.integer("PORT", kserve.http_port or 8080, minimum=1, maximum=65535),
        listen_address=reader.ip_address("LISTEN_ADDRESS"),
        access_log=reader.choice("ACCESS_LOG", ("true", "false"), "false") == "true",
        isvc_name=kserve.model_name if kserve.model_name and kserve.model_name != model_name else None,
        canary=_load_canary(reader, model_name) if role is None else _none_in_role(reader, CANARY_PREFIX, role),
        scaler=_load_scaler(reader) if role is None else _none_in_role(reader, "SCALER_", role),
        pipeline_role=role,
        pipeline_rewards=_load_pipeline_rewards(reader, role),
        pipeline_best_of_n=_load_best_of_n(reader, role),
        coalesce=_load_coalesce(reader),
        identity=_load_identity(reader),
    )
    if config.model_kind == "process" and not config.step_tag:
        raise ConfigError(f"{PREFIX}STEP_TAG must not be empty for a process reward model")
    if config.reward_token_id is not None and config.model_kind != "token":
        raise ConfigError(
            f"{PREFIX}REWARD_TOKEN_ID applies only to {PREFIX}MODEL_KIND=token (a token reward model whose "
            f"score is read at a reward token), not {config.model_kind}"
        )
    if config.auth_token_file is not None and not config.auth_token_file.is_file():
        raise ConfigError(f"{PREFIX}AUTH_TOKEN_FILE={config.auth_token_file}: no such file")
    return config


def _none_in_role(reader: _Reader, prefix: str, role: str) -> None:
    """Rollouts and KEDA's scaler are a RewardModel's; a role's gateway refuses their settings."""
    stray = sorted(name for name in reader.env if name.startswith(PREFIX + prefix) and reader.env[name].strip())
    if stray:
        raise ConfigError(f"{', '.join(stray)}: a RewardModel's setting, not used in pipeline role {role}")
    return None


def _actor_only(reader: _Reader, name: str, role: str | None) -> bool:
    """Whether the actor's setting ``name`` is set; refused in any other gateway."""
    if not reader.text(name, ""):
        return False
    if role != "actor":
        where = f"pipeline role {role}" if role else "a RewardModel's gateway"
        raise ConfigError(f"{PREFIX}{name} is the actor's setting ({PREFIX}PIPELINE_ROLE=actor), not {where}'s")
    return True


def _load_pipeline_rewards(reader: _Reader, role: str | None) -> tuple[PipelineReward, ...]:
    """The actor's reward models: [{"step": "reward-<name>", "weight": w, "normalise": "none"|"running"}]."""
    name = "PIPELINE_REWARDS"
    if not _actor_only(reader, name, role):
        if role == "actor":
            raise ConfigError(f"{PREFIX}{name} is required for pipeline role actor (it combines their rewards)")
        return ()
    where = f"{PREFIX}{name}"
    try:
        entries = json.loads(reader.text(name, ""))
    except json.JSONDecodeError as error:
        raise ConfigError(f"{where}: not valid JSON ({error})") from None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where}: expected a non-empty JSON list")
    rewards: list[PipelineReward] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not set(entry) <= {"step", "weight", "normalise"}:
            raise ConfigError(f'{where}[{index}]: expected {{"step", "weight", "normalise"}}')
        step, weight, normalise = entry.get("step"), entry.get("weight"), entry.get("normalise", "none")
        if not isinstance(step, str) or not step.startswith(REWARD_STEP_PREFIX) or step == REWARD_STEP_PREFIX:
            raise ConfigError(f"{where}[{index}].step={step!r}: expected {REWARD_STEP_PREFIX}<reward model>")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            raise ConfigError(f"{where}[{index}].weight={weight!r}: expected a number")
        if normalise not in NORMALISATIONS:
            raise ConfigError(f"{where}[{index}].normalise={normalise!r}: expected one of {', '.join(NORMALISATIONS)}")
        if any(reward.step == step for reward in rewards):
            raise ConfigError(f"{where}: step {step!r} is listed twice")
        rewards.append(PipelineReward(step, float(weight), normalise))
    return tuple(rewards)


def _load_best_of_n(reader: _Reader, role: str | None) -> int | None:
    if not _actor_only(reader, "PIPELINE_BEST_OF_N", role):
        return None
    return reader.integer("PIPELINE_BEST_OF_N", 0, minimum=1)


def _load_canary(reader: _Reader, model_name: str) -> CanaryConfig | None:
    """The candidate of a rollout, where REWARD_GATEWAY_CANARY_URL names one."""
    c = CANARY_PREFIX
    if not reader.text(c + "URL", ""):
        # A canary setting without its URL is a half-rendered rollout: better a
        # refusal at start than a gateway that silently serves the stable model only.
        stray = sorted(name for name in reader.env if name.startswith(PREFIX + c) and reader.env[name].strip())
        if stray:
            raise ConfigError(f"{', '.join(stray)} set without {PREFIX}{c}URL (the candidate's vLLM)")
        return None
    mode = reader.choice(c + "MODE", CANARY_MODES, "shadow")
    percent_file = reader.text(c + "PERCENT_FILE", "")
    if percent_file and reader.text(c + "PERCENT", ""):
        raise ConfigError(
            f"{PREFIX}{c}PERCENT and {PREFIX}{c}PERCENT_FILE are both set: the candidate's share comes from one"
        )
    # The file's content is checked as it is read, at start and on every change (reward_gateway.share).
    percent = reader.integer(c + "PERCENT", 0, minimum=0, maximum=100)
    if mode == "shadow" and percent:
        raise ConfigError(
            f"{PREFIX}{c}PERCENT={percent} applies to {PREFIX}{c}MODE=split; in shadow mode the trainer "
            "always gets the stable model's scores"
        )
    served = reader.text(c + "MODEL_NAME", "") or model_name
    # Both models are often served under the InferenceService's one name; the
    # metrics and /canary must still tell them apart.
    name = reader.text(c + "NAME", "") or (served if served != model_name else f"{model_name}-candidate")
    if name == model_name:
        raise ConfigError(f"{PREFIX}{c}NAME={name!r} is the stable model's name; give the candidate its own")
    header = reader.text(c + "CLIENT_HEADER", "X-Reward-Client").lower()
    if not header or not set(header) <= _TOKEN_CHARS:
        raise ConfigError(f"{PREFIX}{c}CLIENT_HEADER={header!r}: expected an HTTP header name")
    half_life = reader.seconds(c + "HALF_LIFE_SECONDS", 600.0, allow_zero=True)
    return CanaryConfig(
        upstream_url=reader.url(c + "URL"),
        model_name=served,
        name=name,
        mode=mode,
        percent=percent,
        percent_file=Path(percent_file) if percent_file else None,
        sticky=reader.choice(c + "STICKY", CANARY_STICKY, "group"),
        client_header=header,
        shadow_wait_s=reader.seconds(c + "SHADOW_WAIT_SECONDS", 2.0, allow_zero=True),
        half_life_s=half_life or None,
        chat_template=_load_template(reader, c),
        identity=_load_identity(reader, c),
    )


def _load_coalesce(reader: _Reader) -> CoalesceConfig:
    fair_share = reader.choice("FAIR_SHARE", ("true", "false"), "true") == "true"
    raw = reader.text("CLIENT_WEIGHTS", "")
    weights: dict[str, float] = {}
    if raw:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{PREFIX}CLIENT_WEIGHTS: not JSON ({error})") from None
        if not isinstance(parsed, dict) or not all(
            isinstance(k, str) and k and isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            for k, v in parsed.items()
        ):
            raise ConfigError(f"{PREFIX}CLIENT_WEIGHTS: expected a JSON object of client names to positive numbers")
        weights = {name: float(weight) for name, weight in parsed.items()}
    enabled = reader.choice("COALESCE", ("true", "false"), "false") == "true"
    if weights and not enabled:
        raise ConfigError(f"{PREFIX}CLIENT_WEIGHTS applies to the gateway's queue: it needs {PREFIX}COALESCE=true")
    return CoalesceConfig(
        enabled=enabled,
        max_wait_s=reader.number("COALESCE_MAX_WAIT_MS", 5.0, allow_zero=True, unit=" of milliseconds") / 1000,
        max_items=reader.integer("COALESCE_MAX_ITEMS", 64, minimum=1),
        max_batches=reader.integer("COALESCE_MAX_BATCHES", 4, minimum=1),
        max_call_s=reader.number("COALESCE_MAX_CALL_MS", 50.0, allow_zero=True, unit=" of milliseconds") / 1000,
        fair_share=fair_share,
        weights=weights,
        default_weight=reader.number("CLIENT_DEFAULT_WEIGHT", 1.0),
    )


def _load_identity(reader: _Reader, prefix: str = "") -> ModelIdentity:
    generation = reader.text(prefix + "MODEL_GENERATION", "")
    # The candidate is the same RewardModel's: it follows the stable model's file (reward_gateway.generation).
    generation_file = "" if prefix else reader.text("MODEL_GENERATION_FILE", "")
    if generation and generation_file:
        raise ConfigError(
            f"{PREFIX}MODEL_GENERATION and {PREFIX}MODEL_GENERATION_FILE are both set: the generation comes from one"
        )
    return ModelIdentity(
        revision=reader.text(prefix + "MODEL_REVISION", "") or None,
        digest=reader.text(prefix + "MODEL_DIGEST", "") or None,
        generation=reader.integer(prefix + "MODEL_GENERATION", 0, minimum=1) if generation else None,
        generation_file=Path(generation_file) if generation_file else None,
    )


def _load_scaler(reader: _Reader) -> ScalerConfig | None:
    """KEDA's external scaler, where REWARD_GATEWAY_SCALER_PORT gives it a port."""
    if not reader.text("SCALER_PORT", ""):
        stray = sorted(name for name in reader.env if name.startswith(PREFIX + "SCALER_") and reader.env[name].strip())
        if stray:
            raise ConfigError(f"{', '.join(stray)} set without {PREFIX}SCALER_PORT (the scaler's gRPC port)")
        return None
    return ScalerConfig(
        port=reader.integer("SCALER_PORT", 0, minimum=1, maximum=65535),
        metric=reader.choice("SCALER_METRIC", SCALER_METRICS, "items"),
        target=reader.number("SCALER_TARGET", 256.0),
        active_s=reader.seconds("SCALER_ACTIVE_SECONDS", 30.0, allow_zero=True),
        peers=reader.text("SCALER_PEERS", "") or None,
        peer_timeout_s=reader.seconds("SCALER_PEER_TIMEOUT_SECONDS", 1.0),
    )


def _load_template(reader: _Reader, prefix: str = "") -> ChatTemplate | None:
    """The template of REWARD_GATEWAY_<prefix>CHAT_TEMPLATE(_FILE), with its special tokens."""
    template = _read_template(reader, prefix)
    if template is None:
        return None
    # Set on their own, the special tokens win over a tokenizer config's; a
    # BOS known from neither is learnt from vLLM's tokenizer (reward_gateway.scorer).
    return ChatTemplate(
        template.source,
        reader.text(prefix + "BOS_TOKEN", "") or template.bos_token,
        reader.text(prefix + "EOS_TOKEN", "") or template.eos_token,
    )


def _read_template(reader: _Reader, prefix: str) -> ChatTemplate | None:
    inline_name, file_name = f"{prefix}CHAT_TEMPLATE", f"{prefix}CHAT_TEMPLATE_FILE"
    inline = reader.text(inline_name, "")
    path = reader.text(file_name, "")
    if inline and path:
        raise ConfigError(f"set only one of {PREFIX}{inline_name} and {PREFIX}{file_name}")
    if inline:
        return ChatTemplate(inline)
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{PREFIX}{file_name}={path}: {error.strerror}") from None
    if path.endswith(".json"):
        return _template_from_tokenizer_config(path, text, file_name)
    return ChatTemplate(text)


def _template_from_tokenizer_config(path: str, text: str, variable: str = "CHAT_TEMPLATE_FILE") -> ChatTemplate:
    # A model's tokenizer_config.json carries the template and the special tokens
    # it names, so one file reproduces what transformers' apply_chat_template does.
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{PREFIX}{variable}={path}: not valid JSON ({error})") from None
    template = data.get("chat_template")
    if isinstance(template, list):  # named templates; "default" is what apply_chat_template uses
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    sibling = Path(path).with_name("chat_template.jinja")
    if template is None and sibling.is_file():
        # transformers 4.50+ saves the template beside the config instead of in it.
        template = sibling.read_text(encoding="utf-8")
    if not isinstance(template, str):
        raise ConfigError(f"{PREFIX}{variable}={path}: no chat_template in this tokenizer config")
    return ChatTemplate(template, _token_text(data.get("bos_token")), _token_text(data.get("eos_token")))


def _token_text(token: object) -> str | None:
    if isinstance(token, dict):  # serialised AddedToken
        token = token.get("content")
    return token if isinstance(token, str) and token else None


class _Reader:
    def __init__(self, env: Mapping[str, str]):
        self.env = env

    def text(self, name: str, default: str) -> str:
        return self.env.get(PREFIX + name, default).strip()

    def ip_address(self, name: str) -> str:
        value = self.text(name, "")
        if value:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise ConfigError(f"{PREFIX}{name}={value!r}: expected an IP address") from None
        return value

    def required(self, name: str, fallback: str | None = None, fallback_arg: str = "") -> str:
        value = self.text(name, "") or (fallback or "").strip()
        if not value:
            raise ConfigError(f"{PREFIX}{name} is required" + (f" (or {fallback_arg})" if fallback_arg else ""))
        return value

    def url(self, name: str, fallback_host: str | None = None, fallback_arg: str = "") -> str:
        source = f"{PREFIX}{name}" if self.text(name, "") else fallback_arg
        value = self.required(name, fallback_host, fallback_arg).rstrip("/")
        if "://" not in value:
            # KServe hands transformers a bare host (or host:port) for the predictor.
            value = "http://" + value
        if not value.startswith(("http://", "https://")):
            raise ConfigError(f"{source}={value!r}: expected an http:// or https:// URL")
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self.text(name, default).lower()
        if value not in choices:
            raise ConfigError(f"{PREFIX}{name}={value!r}: expected one of {', '.join(choices)}")
        return value

    def integer(self, name: str, default: int, minimum: int, maximum: int | None = None) -> int:
        raw = self.text(name, str(default))
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{PREFIX}{name}={raw!r}: expected an integer") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            raise ConfigError(f"{PREFIX}{name}={value}: expected {bound}")
        return value

    def seconds(self, name: str, default: float, allow_zero: bool = False) -> float:
        return self.number(name, default, allow_zero, " of seconds")

    def number(self, name: str, default: float, allow_zero: bool = False, unit: str = "") -> float:
        raw = self.text(name, str(default))
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{PREFIX}{name}={raw!r}: expected a number{unit}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise ConfigError(f"{PREFIX}{name}={raw}: expected a positive number{unit}")
        return value
