"""The gateway's configuration, read once from environment variables.

The operator renders these into the transformer container; every variable, its parser, default, unit and
meaning is one row of reward_gateway.config.settings, and the fields below are tied to their rows (`from_env`:
the row's value is the field's default, and `read_fields` reads it from the environment). Bad
values stop the process at start with a message naming the variable, instead of surfacing later as wrong
rewards. The arguments KServe appends to a transformer's command fill in what the environment leaves unset
(see KServeArgs).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reward_gateway.config.identity import ModelIdentity
from reward_gateway.config.judge import JudgeConfig
from reward_gateway.config.parsers import PipelineReward
from reward_gateway.config.settings import (
    ACTOR,
    PREFIX,
    PROCESS_RESERVE_BYTES,
    REWARD_MODEL,
    SETTINGS,
    ConfigError,
    Env,
    Setting,
    from_env,
    read_fields,
)
from reward_gateway.items.kinds import KINDS, ModelKind

__all__ = ["PREFIX", "PROCESS_RESERVE_BYTES", "ConfigError", "PipelineReward"]

# What REWARD_GATEWAY_MODEL_KIND takes.
MODEL_KINDS = tuple(KINDS)
# Without a known limit (a local run): the budget of the operator's default 1 GiB.
DEFAULT_MEMORY_LIMIT_BYTES = Env.MEMORY_LIMIT_BYTES.value


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
class CanaryConfig:
    """A candidate reward model rolled out beside the stable one (reward_gateway.rollout.canary)."""

    upstream_url: str  # the candidate's vLLM
    model_name: str  # its --served-model-name, sent in each call
    name: str  # its name in metrics, /canary and the `model` label of its own series
    mode: str = from_env(Env.CANARY_MODE)
    percent: int = from_env(Env.CANARY_PERCENT)  # split: the share of requests the candidate answers (fixed)
    # Where the share is followed from instead, while the gateway runs (reward_gateway.config.share); percent is then 0.
    percent_file: Path | None = from_env(Env.CANARY_PERCENT_FILE)
    sticky: str = from_env(Env.CANARY_STICKY)
    shadow_wait_s: float = from_env(Env.CANARY_SHADOW_WAIT_SECONDS)
    # None (0 in the environment): the window keeps everything since start.
    half_life_s: float | None = Env.CANARY_HALF_LIFE_SECONDS.value
    # The candidate's own template where it has one; None: the stable model's.
    chat_template: ChatTemplate | None = None
    # The candidate's own judge where it has one (a new prompt template or verdict); None: the stable's.
    judge: JudgeConfig | None = from_env(Env.CANARY_JUDGE)
    identity: ModelIdentity = ModelIdentity()


@dataclass(frozen=True)
class ScalerConfig:
    """KEDA's external scaler, served by the gateway (reward_gateway.scale.scaler)."""

    port: int
    # What GetMetrics counts, in flight on this gateway (held ones included):
    # scored items (what vLLM queues and runs) or requests.
    metric: str = from_env(Env.SCALER_METRIC)
    target: float = from_env(Env.SCALER_TARGET)  # of that count per predictor replica (the HPA's AverageValue)
    # IsActive stays true this long after the last request ended, so that a burst
    # between two of KEDA's polls still counts, and the cooldown starts after it.
    active_s: float = from_env(Env.SCALER_ACTIVE_SECONDS)
    # A name whose addresses are all the gateway's replicas (a headless Service);
    # each replica then answers for all of them. None: this replica alone.
    peers: str | None = from_env(Env.SCALER_PEERS)
    peer_timeout_s: float = from_env(Env.SCALER_PEER_TIMEOUT_SECONDS)

    @property
    def metric_name(self) -> str:
        """The metric's name in GetMetricSpec (KEDA's HPA sees it as s<trigger>-<name>)."""
        return f"inflight-{self.metric}"


@dataclass(frozen=True)
class CoalesceConfig:
    """Concurrent scoring calls merged into fewer vLLM calls, and shared fairly (reward_gateway.scoring.coalesce)."""

    enabled: bool = from_env(Env.COALESCE)  # off until its effect on held requests and memory is measured (README)
    max_wait_s: float = from_env(Env.COALESCE_MAX_WAIT_MS)  # the longest a call waits for others while vLLM is busy
    max_items: int = from_env(Env.COALESCE_MAX_ITEMS)  # texts per merged call
    max_batches: int = from_env(Env.COALESCE_MAX_BATCHES)  # merged calls in flight at once; the rest queue here
    # While clients share vLLM, a merged call no bigger than vLLM answers in this time at its measured pace
    # (0: no bound by time), which bounds what a light client waits behind a flood (reward_gateway.scoring.coalesce)
    max_call_s: float = from_env(Env.COALESCE_MAX_CALL_MS)
    fair_share: bool = from_env(Env.FAIR_SHARE)  # the queue in weighted fair order between clients (else arrival order)
    weights: Mapping[str, float] = field(default_factory=dict)  # by client; others weigh default_weight
    default_weight: float = from_env(Env.CLIENT_DEFAULT_WEIGHT)


@dataclass(frozen=True)
class GatewayConfig:
    upstream_url: str
    model_name: str
    model_kind: str = from_env(Env.MODEL_KIND)
    step_tag: str = from_env(Env.STEP_TAG)
    step_aggregate: str = from_env(Env.STEP_AGGREGATE)
    # A token model whose own scorer appends a reward token to the templated conversation and reads
    # the score there (InternLM2-Reward's get_score, config.json reward_token_id): its id. None: the
    # conversation is scored as templated (Qwen2.5-Math-RM's scorer appends nothing).
    reward_token_id: int | None = from_env(Env.REWARD_TOKEN_ID)
    # A judge's prompt template and verdict (reward_gateway.judge.scorer); None for the score heads.
    judge: JudgeConfig | None = from_env(Env.JUDGE)
    template_mode: str = from_env(Env.CHAT_TEMPLATE_MODE)
    chat_template: ChatTemplate | None = None
    max_concurrency: int = from_env(Env.MAX_CONCURRENCY)
    request_timeout_s: float = from_env(Env.REQUEST_TIMEOUT_SECONDS)
    scale_from_zero_timeout_s: float = from_env(Env.SCALE_FROM_ZERO_TIMEOUT_SECONDS)
    # After SIGTERM, how long the gateway keeps answering before it stops listening (reward_gateway.http.server).
    drain_s: float = from_env(Env.DRAIN_SECONDS)
    # Requests held at once while the predictor is away (reward_gateway.signals.load).
    max_held_requests: int = from_env(Env.MAX_HELD_REQUESTS)
    max_items: int = from_env(Env.MAX_ITEMS)
    # What the requests held at once may cost (reward_gateway.http.asgi).
    memory_budget_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES - PROCESS_RESERVE_BYTES
    truncate_prompt_tokens: int | None = from_env(Env.TRUNCATE_PROMPT_TOKENS)
    auth_token_file: Path | None = from_env(Env.AUTH_TOKEN_FILE)
    port: int = from_env(Env.PORT)
    # The one address the HTTP port and the scaler's listen on; empty: all interfaces (in a pod).
    listen_address: str = ""
    access_log: bool = from_env(Env.ACCESS_LOG)
    # The header naming the client (lower case, as ASGI hands headers over): its fair share, and a
    # rollout's sticky key where it is sticky by client (reward_gateway.config.identity).
    client_header: str = from_env(Env.CANARY_CLIENT_HEADER)
    # KServe's name for the model (--model_name, the InferenceService's name)
    # where it differs from model_name: the v1 routes answer to it as well,
    # as KServe's InferenceGraph calls /v1/models/<isvc name>:predict.
    isvc_name: str | None = None
    canary: CanaryConfig | None = None
    scaler: ScalerConfig | None = None
    # None: a RewardModel's gateway. Otherwise the RLHFPipeline role whose routes it
    # serves (reward_gateway.pipeline.routes); the rewards and best-of-n are the actor's.
    pipeline_role: str | None = None
    pipeline_rewards: tuple[PipelineReward, ...] = ()
    pipeline_best_of_n: int | None = from_env(Env.PIPELINE_BEST_OF_N)
    coalesce: CoalesceConfig = CoalesceConfig()
    identity: ModelIdentity = ModelIdentity()

    @property
    def kind(self) -> ModelKind:
        return KINDS[self.model_kind]

    @property
    def v1_names(self) -> tuple[str, ...]:
        """The names the KServe v1 routes (readiness, listing, predict) answer to."""
        return (self.model_name, self.isvc_name) if self.isvc_name else (self.model_name,)


@dataclass(frozen=True)
class _TemplateRows:
    """The variables of one model's chat template: the stable model's, or the candidate's."""

    inline: Setting[str]
    file: Setting[Path]
    bos: Setting[str]
    eos: Setting[str]


@dataclass(frozen=True)
class _IdentityRows:
    revision: Setting[str]
    digest: Setting[str]
    generation: Setting[int]


STABLE_TEMPLATE = _TemplateRows(Env.CHAT_TEMPLATE, Env.CHAT_TEMPLATE_FILE, Env.BOS_TOKEN, Env.EOS_TOKEN)
CANDIDATE_TEMPLATE = _TemplateRows(
    Env.CANARY_CHAT_TEMPLATE, Env.CANARY_CHAT_TEMPLATE_FILE, Env.CANARY_BOS_TOKEN, Env.CANARY_EOS_TOKEN
)
STABLE_IDENTITY = _IdentityRows(Env.MODEL_REVISION, Env.MODEL_DIGEST, Env.MODEL_GENERATION)
CANDIDATE_IDENTITY = _IdentityRows(Env.CANARY_MODEL_REVISION, Env.CANARY_MODEL_DIGEST, Env.CANARY_MODEL_GENERATION)


def load_config(env: Mapping[str, str] | None = None, kserve: KServeArgs | None = None) -> GatewayConfig:
    env = os.environ if env is None else env
    kserve = kserve or KServeArgs()
    role = Env.PIPELINE_ROLE.read(env)
    if role is not None:
        _refuse_in_role(env, role)
    mode = Env.CHAT_TEMPLATE_MODE.required(env)
    template = _load_template(env, STABLE_TEMPLATE)
    if mode == "gateway" and template is None:
        raise ConfigError(
            f"{Env.CHAT_TEMPLATE_MODE.env}=gateway needs {Env.CHAT_TEMPLATE_FILE.env} or {Env.CHAT_TEMPLATE.env}"
        )
    model_name = Env.MODEL_NAME.required(env, kserve.model_name)
    config = read_fields(
        GatewayConfig,
        env,
        upstream_url=Env.UPSTREAM_URL.required(env, kserve.predictor_host),
        model_name=model_name,
        template_mode=mode,
        chat_template=template,
        # The container's memory limit, from the downward API (resourceFieldRef limits.memory).
        memory_budget_bytes=Env.MEMORY_LIMIT_BYTES.required(env) - PROCESS_RESERVE_BYTES,
        port=Env.PORT.required(env, None if kserve.http_port is None else str(kserve.http_port)),
        listen_address=Env.LISTEN_ADDRESS.read(env) or "",
        isvc_name=kserve.model_name if kserve.model_name and kserve.model_name != model_name else None,
        canary=_load_canary(env, model_name) if role is None else None,
        scaler=_load_scaler(env) if role is None else None,
        pipeline_role=role,
        pipeline_rewards=_load_pipeline_rewards(env, role),
        coalesce=_load_coalesce(env),
        identity=_load_identity(env, STABLE_IDENTITY, Env.MODEL_GENERATION_FILE),
    )
    if config.judge is not None:
        config = replace(config, identity=replace(config.identity, judge=config.judge.digest))
    kind = config.kind
    if config.reward_token_id is not None and not kind.reward_token:
        raise ConfigError(
            f"{Env.REWARD_TOKEN_ID.env} applies only to {Env.MODEL_KIND.env}="
            f"{'|'.join(k.name for k in KINDS.values() if k.reward_token)} (a token reward model whose "
            f"score is read at a reward token), not {config.model_kind}"
        )
    _check_judge(config)
    if config.auth_token_file is not None and not config.auth_token_file.is_file():
        raise ConfigError(f"{Env.AUTH_TOKEN_FILE.env}={config.auth_token_file}: no such file")
    return config


def _check_judge(config: GatewayConfig) -> None:
    """A judge has its prompt and verdict, and none of the settings that only pooled scoring reads."""
    judges = "|".join(k.name for k in KINDS.values() if k.judge)
    if not config.kind.judge:
        if config.judge is not None:
            raise ConfigError(f"{Env.JUDGE.env} applies only to {Env.MODEL_KIND.env}={judges}, not {config.model_kind}")
        if config.canary is not None and config.canary.judge is not None:
            raise ConfigError(f"{Env.CANARY_JUDGE.env} applies only to {Env.MODEL_KIND.env}={judges}")
        return
    if config.judge is None:
        raise ConfigError(f"{Env.MODEL_KIND.env}={config.model_kind} needs {Env.JUDGE.env}: its prompt and verdict")
    if config.template_mode != "upstream":
        raise ConfigError(
            f"{Env.CHAT_TEMPLATE_MODE.env}={config.template_mode}: a judge's prompt goes to vLLM as messages, and vLLM "
            "applies the judge model's own template (upstream)"
        )
    if config.coalesce.enabled:
        raise ConfigError(
            f"{Env.COALESCE.env}=true: the gateway merges pooled scoring calls; a judge's verdicts are one chat "
            "completion each"
        )


def _set(env: Mapping[str, str], scope: str, prefix: str = "") -> list[str]:
    """The variables of ``scope`` (whose names start with ``prefix``) that are set."""
    return [s.env for s in SETTINGS if s.scope == scope and s.name.startswith(prefix) and s.text(env)]


def _none_without(env: Mapping[str, str], switch: Setting[Any], what: str) -> None:
    """None, where the setting that turns a feature on is unset and so are the feature's others (those named
    like it: CANARY_URL's CANARY_*); one of those set alone is refused."""
    prefix = switch.name.split("_", 1)[0] + "_"
    stray = _set(env, REWARD_MODEL, prefix)
    if stray:
        raise ConfigError(f"{', '.join(sorted(stray))} set without {switch.env} ({what})")
    return None


def _refuse_in_role(env: Mapping[str, str], role: str) -> None:
    """A role's gateway scores nothing itself: a RewardModel's setting there is a mistake in what rendered it."""
    stray = _set(env, REWARD_MODEL)
    if stray:
        raise ConfigError(f"{', '.join(sorted(stray))}: a RewardModel's setting, not used in pipeline role {role}")


def _load_pipeline_rewards(env: Mapping[str, str], role: str | None) -> tuple[PipelineReward, ...]:
    """The actor's reward models: [{"step": "reward-<name>", "weight": w, "normalise": "none"|"running"}]."""
    if role != "actor":
        for name in _set(env, ACTOR):
            where = f"pipeline role {role}" if role else "a RewardModel's gateway"
            raise ConfigError(f"{name} is the actor's setting ({Env.PIPELINE_ROLE.env}=actor), not {where}'s")
        return ()
    rewards = Env.PIPELINE_REWARDS.read(env)
    if rewards is None:
        raise ConfigError(f"{Env.PIPELINE_REWARDS.env} is required for pipeline role actor (it combines their rewards)")
    return rewards


def _load_canary(env: Mapping[str, str], model_name: str) -> CanaryConfig | None:
    """The candidate of a rollout, where REWARD_GATEWAY_CANARY_URL names one."""
    url = Env.CANARY_URL.read(env)
    if url is None:
        # A canary setting without its URL is a half-rendered rollout: better a
        # refusal at start than a gateway that silently serves the stable model only.
        return _none_without(env, Env.CANARY_URL, "the candidate's vLLM")
    mode = Env.CANARY_MODE.required(env)
    if Env.CANARY_PERCENT_FILE.text(env) and Env.CANARY_PERCENT.text(env):
        raise ConfigError(
            f"{Env.CANARY_PERCENT.env} and {Env.CANARY_PERCENT_FILE.env} are both set: the candidate's share comes "
            "from one"
        )
    # The file's content is checked as it is read, at start and on every change (reward_gateway.config.share).
    percent = Env.CANARY_PERCENT.required(env)
    if mode == "shadow" and percent:
        raise ConfigError(
            f"{Env.CANARY_PERCENT.env}={percent} applies to {Env.CANARY_MODE.env}=split; in shadow mode the trainer "
            "always gets the stable model's scores"
        )
    served = Env.CANARY_MODEL_NAME.read(env) or model_name
    # Both models are often served under the InferenceService's one name; the
    # metrics and /canary must still tell them apart.
    name = Env.CANARY_NAME.read(env) or (served if served != model_name else f"{model_name}-candidate")
    if name == model_name:
        raise ConfigError(f"{Env.CANARY_NAME.env}={name!r} is the stable model's name; give the candidate its own")
    return read_fields(
        CanaryConfig,
        env,
        upstream_url=url,
        model_name=served,
        name=name,
        mode=mode,
        percent=percent,
        half_life_s=Env.CANARY_HALF_LIFE_SECONDS.required(env) or None,
        chat_template=_load_template(env, CANDIDATE_TEMPLATE),
        identity=_load_identity(env, CANDIDATE_IDENTITY),
    )


def _load_coalesce(env: Mapping[str, str]) -> CoalesceConfig:
    weights = Env.CLIENT_WEIGHTS.read(env) or {}
    enabled = Env.COALESCE.required(env)
    if weights and not enabled:
        raise ConfigError(f"{Env.CLIENT_WEIGHTS.env} applies to the gateway's queue: it needs {Env.COALESCE.env}=true")
    return read_fields(CoalesceConfig, env, enabled=enabled, weights=weights)


def _load_identity(
    env: Mapping[str, str], rows: _IdentityRows, generation_file: Setting[Path] | None = None
) -> ModelIdentity:
    # The candidate is the same RewardModel's: it follows the stable model's file (reward_gateway.config.generation).
    followed = generation_file.read(env) if generation_file is not None else None
    if followed is not None and rows.generation.text(env):
        raise ConfigError(
            f"{rows.generation.env} and {generation_file.env} are both set: the generation comes from one"  # type: ignore[union-attr]
        )
    return ModelIdentity(
        revision=rows.revision.read(env),
        digest=rows.digest.read(env),
        generation=rows.generation.read(env),
        generation_file=followed,
    )


def _load_scaler(env: Mapping[str, str]) -> ScalerConfig | None:
    """KEDA's external scaler, where REWARD_GATEWAY_SCALER_PORT gives it a port."""
    port = Env.SCALER_PORT.read(env)
    if port is None:
        return _none_without(env, Env.SCALER_PORT, "the scaler's gRPC port")
    return read_fields(ScalerConfig, env, port=port)


def _load_template(env: Mapping[str, str], rows: _TemplateRows) -> ChatTemplate | None:
    """The template of REWARD_GATEWAY_[CANARY_]CHAT_TEMPLATE(_FILE), with its special tokens."""
    template = _read_template(env, rows)
    if template is None:
        return None
    # Set on their own, the special tokens win over a tokenizer config's; a
    # BOS known from neither is learnt from vLLM's tokenizer (reward_gateway.scoring.scorer).
    return ChatTemplate(
        template.source,
        rows.bos.read(env) or template.bos_token,
        rows.eos.read(env) or template.eos_token,
    )


def _read_template(env: Mapping[str, str], rows: _TemplateRows) -> ChatTemplate | None:
    inline = rows.inline.read(env)
    path = rows.file.read(env)
    if inline and path:
        raise ConfigError(f"set only one of {rows.inline.env} and {rows.file.env}")
    if inline:
        return ChatTemplate(inline)
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{rows.file.env}={path}: {error.strerror}") from None
    if path.suffix == ".json":
        return _template_from_tokenizer_config(path, text, rows.file.env)
    return ChatTemplate(text)


def _template_from_tokenizer_config(path: Path, text: str, variable: str) -> ChatTemplate:
    # A model's tokenizer_config.json carries the template and the special tokens
    # it names, so one file reproduces what transformers' apply_chat_template does.
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{variable}={path}: not valid JSON ({error})") from None
    template = data.get("chat_template")
    if isinstance(template, list):  # named templates; "default" is what apply_chat_template uses
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    sibling = path.with_name("chat_template.jinja")
    if template is None and sibling.is_file():
        # transformers 4.50+ saves the template beside the config instead of in it.
        template = sibling.read_text(encoding="utf-8")
    if not isinstance(template, str):
        raise ConfigError(f"{variable}={path}: no chat_template in this tokenizer config")
    return ChatTemplate(template, _token_text(data.get("bos_token")), _token_text(data.get("eos_token")))


def _token_text(token: object) -> str | None:
    if isinstance(token, dict):  # serialised AddedToken
        token = token.get("content")
    return token if isinstance(token, str) and token else None
