"""Every setting of the gateway, once: its variable, how it is read, its default, its unit and what it means.

The gateway is configured by environment variables only (the operator renders them into the transformer
container). Each is one row of `Env` below; `reward_gateway.config.gateway` builds `GatewayConfig` from the rows
(and its fields default to their values), and the README's environment table is generated from them:
`make gateway-readme` writes it, and a unit test fails where the README and the rows differ. So a default
or a unit is written in one place, as vLLM's envs.py keeps one entry per variable.

A row's default is written as it would be in the environment (milliseconds for a `_MS` variable); its value
is what the parser makes of it (seconds, for the same variable), which is what the config holds.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from reward_gateway.config.identity import CLIENT_HEADER
from reward_gateway.config.judge import judge
from reward_gateway.config.parsers import (
    Invalid,
    Parser,
    boolean,
    choice,
    client_weights,
    header_name,
    integer,
    ip_address,
    milliseconds,
    number,
    path,
    pipeline_rewards,
    seconds,
    text,
    url,
)
from reward_gateway.items.kinds import KINDS

PREFIX = "REWARD_GATEWAY_"
T = TypeVar("T")
C = TypeVar("C")

MIB = 1024 * 1024
# What the process takes besides the requests it holds: about 55 MiB at start, plus connections, metrics,
# vLLM's answers of a few numbers per text in flight, and what the allocator keeps after a burst. The rest of
# the container's memory limit is the requests' budget (reward_gateway.http.asgi).
PROCESS_RESERVE_BYTES = 256 * MIB

# Which gateways read a setting: any; only a RewardModel's (a pipeline role's gateway scores nothing itself, so
# one of these set there is a mistake in what rendered it, refused at start rather than ignored); only the actor's.
ANY, REWARD_MODEL, ACTOR = "any", "RewardModel", "actor"


class ConfigError(ValueError):
    """A variable is missing or holds a value the gateway cannot use."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One variable. Its name is the attribute's name in `Env` (set when the class is made)."""

    parse: Parser[T]
    default: str | None  # as written in the environment; None: unset
    doc: str
    scope: str = ANY
    # KServe's transformer argument that stands in for the variable where it is unset (reward_gateway.config.gateway).
    argument: str | None = None
    note: str = ""  # said after the default in the README, e.g. the same in other words
    name: str = field(default="", init=False)

    def __set_name__(self, owner: type, name: str) -> None:
        object.__setattr__(self, "name", name)

    @property
    def env(self) -> str:
        return PREFIX + self.name

    @property
    def value(self) -> T:
        """The default, as the config holds it."""
        if self.default is None:
            raise ValueError(f"{self.env} has no default")
        return self.parse.read(self.default)

    def text(self, env: Mapping[str, str]) -> str:
        """The variable's text as set; empty where unset (an empty variable is unset)."""
        return env.get(self.env, "").strip()

    def read(self, env: Mapping[str, str], fallback: str | None = None) -> T | None:
        """The value set (else ``fallback``, else the default, else None), or ConfigError naming the variable."""
        raw = self.text(env)
        source = self.env
        if not raw and fallback is not None and fallback.strip():
            raw, source = fallback.strip(), self.argument or self.env
        if not raw:
            if self.default is None:
                return None
            raw = self.default
        try:
            return self.parse.read(raw)
        except Invalid as error:
            where = f"{source}={raw!r}" if error.at is None else f"{source}{error.at}"
            raise ConfigError(f"{where}: {error.message}") from None

    def required(self, env: Mapping[str, str], fallback: str | None = None) -> T:
        value = self.read(env, fallback)
        if value is None:
            raise ConfigError(f"{self.env} is required" + (f" (or {self.argument})" if self.argument else ""))
        return value

    def shown_default(self) -> str:
        """The README's default column."""
        shown = f"`{self.default}`" if self.default is not None else "unset"
        if self.argument:
            shown = f"`{self.argument}`" + (f", else {shown}" if self.default is not None else "")
        return shown + (f" {self.note}" if self.note else "")


class Env:
    """The rows, in the README's order."""

    UPSTREAM_URL = Setting(
        url(),
        None,
        "vLLM predictor URL; `https` is verified against the system CAs (`SSL_CERT_FILE` names another bundle)",
        argument="--predictor_host",
    )
    MODEL_NAME = Setting(
        text(), None, "vLLM `--served-model-name`; also a KServe v1 model name", argument="--model_name"
    )
    MODEL_KIND = Setting(
        choice(*KINDS),
        "sequence",
        "`sequence` (/classify), `token` (/pooling ALL, last token), `process` (/pooling STEP), `judge` (a "
        "generative judge's verdict, /v1/chat/completions; needs `_JUDGE`); each kind's vLLM request and "
        "extractor: `reward_gateway.items.kinds`",
        REWARD_MODEL,
    )
    REWARD_TOKEN_ID = Setting(
        integer(minimum=0),
        None,
        "`token` models only: the id of the reward token the model's own scorer appends after the templated "
        "conversation and reads the score at (InternLM2-Reward's `config.json` `reward_token_id`): each item's ids "
        "from vLLM's `/tokenize` end in it, and go to `/pooling` ([Reward tokens](#reward-tokens)). Unset: texts "
        "or `messages` go as they are (Qwen2.5-Math-RM's scorer appends nothing)",
        REWARD_MODEL,
    )
    JUDGE = Setting(
        judge(),
        None,
        "`judge` models only, and required there: the judge's prompt template and verdict, the RewardModel's "
        "`spec.judge` as JSON (see [Judges](#judges)); its digest is the `judge` of every answer's identity",
        REWARD_MODEL,
    )
    STEP_TAG = Setting(
        text(), "<extra_0>", "step tag text for process models (appended after each of `steps`)", REWARD_MODEL
    )
    STEP_AGGREGATE = Setting(
        choice("min", "last", "mean", "product"), "min", "process reward from step scores", REWARD_MODEL
    )
    CHAT_TEMPLATE_MODE = Setting(
        choice("upstream", "gateway"),
        "upstream",
        "`upstream`: send `messages` to vLLM (one conversation per call); `gateway`: render with jinja2 here, so "
        "groups batch into one call",
        REWARD_MODEL,
    )
    CHAT_TEMPLATE_FILE = Setting(
        path(),
        None,
        "jinja template file, or the model's `tokenizer_config.json` (template and BOS/EOS from it, or from "
        "`chat_template.jinja` beside it)",
        REWARD_MODEL,
    )
    CHAT_TEMPLATE = Setting(text(), None, "inline template (alternative to the file)", REWARD_MODEL)
    BOS_TOKEN = Setting(
        text(),
        None,
        "the BOS text a gateway-rendered template writes as `bos_token`",
        REWARD_MODEL,
        note="(the tokenizer config's, else learnt from vLLM)",
    )
    EOS_TOKEN = Setting(
        text(),
        None,
        "the EOS text a gateway-rendered template writes as `eos_token` (vLLM cannot tell it; the operator's CEL "
        "asks for `gateway.eosToken` where the template uses it)",
        REWARD_MODEL,
        note="(the tokenizer config's)",
    )
    MAX_CONCURRENCY = Setting(integer(minimum=1), "64", "upstream calls in flight, shared by all requests")
    REQUEST_TIMEOUT_SECONDS = Setting(
        seconds(),
        "180",
        "per upstream call, and the longest a call waits for a free upstream slot (then 503 + `Retry-After`); in "
        "Knative mode the operator renders it as this plus `SCALE_FROM_ZERO_TIMEOUT_SECONDS`: Knative's activator "
        "holds a call to a predictor at zero while it wakes",
    )
    SCALE_FROM_ZERO_TIMEOUT_SECONDS = Setting(
        seconds(allow_zero=True),
        "150",
        "the longest a request is held: refused connections / vLLM 503 are retried this long before answering "
        "503 + `Retry-After`: under OpenRLHF's 180 s client timeout, so each of its 5 tries ends with the reason, "
        "not a timeout of its own (5 x 150 s cover a 12-minute cold start)",
    )
    DRAIN_SECONDS = Setting(
        seconds(allow_zero=True),
        "5",
        "after SIGTERM (a pod's end), how long the gateway goes on answering, with `Connection: close`, before "
        "its graceful shutdown: the Service drops a terminating pod a moment after the kubelet signals it. `0` "
        "stops at once, as SIGINT does. Held requests, and those that would wait, get 503 + `Retry-After: 1` at "
        "once, so their clients retry on a pod that stays",
    )
    MAX_HELD_REQUESTS = Setting(
        integer(minimum=1),
        "1024",
        "requests held at once for a predictor that is away (scaled to zero, starting); one more is a 503 + "
        "`Retry-After` at once",
    )
    MAX_ITEMS = Setting(integer(minimum=1), "8192", "items per request")
    MEMORY_LIMIT_BYTES = Setting(
        integer(minimum=2 * PROCESS_RESERVE_BYTES, unit="bytes"),
        str(1024 * MIB),
        "the container's memory limit (the operator renders it from the downward API, `limits.memory`, and in "
        "Knative mode, whose Services take no downward API by default, as the number it sets); the "
        f"requests' memory budget is it less {PROCESS_RESERVE_BYTES // MIB} MiB (see [Memory](#memory))",
        note="(1 GiB)",
    )
    ACCESS_LOG = Setting(
        boolean(),
        "false",
        "`true` logs one line per request (uvicorn's access log: the path escaped, the query string left out, as "
        "it may carry a token); `false`: no line per request, probes included",
    )
    TRUNCATE_PROMPT_TOKENS = Setting(
        integer(minimum=-1),
        None,
        "sent as vLLM `truncate_prompt_tokens` (`-1` = model max); unset: over-long input is a 400",
        REWARD_MODEL,
    )
    AUTH_TOKEN_FILE = Setting(
        path(), None, "file (Secret mount) with accepted bearer tokens, one per line, re-read on change"
    )
    PORT = Setting(
        integer(minimum=1, maximum=65535),
        "8080",
        "listen port (all interfaces, or `REWARD_GATEWAY_LISTEN_ADDRESS`)",
        argument="--http_port",
    )
    LISTEN_ADDRESS = Setting(
        ip_address(),
        None,
        "one IP address for the HTTP port and the scaler's to listen on; unset: all interfaces (what a pod wants). "
        "The test bed runs gateways on the host, each on a loopback address of its own, so two can serve the "
        "scaler port the operator renders",
    )
    SCALER_PORT = Setting(
        integer(minimum=1, maximum=65535),
        None,
        "KEDA's external scaler (gRPC, plaintext) on this port, all interfaces (or "
        "`REWARD_GATEWAY_LISTEN_ADDRESS`); unset: no scaler, and every other `SCALER_` variable must be unset too",
        REWARD_MODEL,
    )
    SCALER_METRIC = Setting(
        choice("items", "requests"),
        "items",
        "what GetMetrics counts in flight on the gateway, held ones included: `items` (scored items: what vLLM "
        "queues and runs; a step batched into one request still counts in full) or `requests`; the metric is "
        "named `inflight-items` / `inflight-requests` (KEDA's HPA: `s0-inflight-items`)",
        REWARD_MODEL,
    )
    SCALER_TARGET = Setting(
        number(),
        "256",
        "that count per predictor replica (the HPA's `AverageValue` target): it wants ceil(in flight / target) "
        "replicas",
        REWARD_MODEL,
    )
    SCALER_ACTIVE_SECONDS = Setting(
        seconds(allow_zero=True),
        "30",
        "IsActive stays true this long after the last request ended: set it to the ScaledObject's "
        "`pollingInterval`, so a burst between two polls still counts and `cooldownPeriod` starts after it",
        REWARD_MODEL,
    )
    SCALER_PEERS = Setting(
        text(),
        None,
        "the other replicas: comma-separated `host[:port]` (port: the scaler's own), each name standing for all "
        "its addresses, such as a headless Service over the gateway's pods; each replica then answers for all of "
        "them (see below); unset: for itself alone (one replica)",
        REWARD_MODEL,
    )
    SCALER_PEER_TIMEOUT_SECONDS = Setting(
        seconds(),
        "1",
        "how long a replica waits for a peer's figures; a peer that does not answer counts as nothing (logged)",
        REWARD_MODEL,
    )
    COALESCE = Setting(
        boolean(),
        "false",
        "`true`: concurrent calls of texts to the model are merged into fewer vLLM calls and queued fairly by "
        "client (see [Scheduling](#scheduling-coalescing-and-fair-share)); `false`: each request's calls go as "
        "planned, one per group or item",
    )
    COALESCE_MAX_WAIT_MS = Setting(
        milliseconds(allow_zero=True),
        "5",
        "the longest a call waits in the queue for others while a merged call is in flight (never while none is: "
        "an idle gateway sends at once); `0`: merge only what arrives together",
    )
    COALESCE_MAX_ITEMS = Setting(
        integer(minimum=1), "64", "texts per merged call (a part larger than this goes alone, whole)"
    )
    COALESCE_MAX_BATCHES = Setting(
        integer(minimum=1),
        "4",
        "merged calls in flight at once; the rest wait in the gateway's queue (at most the request timeout, then "
        "503 + `Retry-After`)",
    )
    COALESCE_MAX_CALL_MS = Setting(
        milliseconds(allow_zero=True),
        "50",
        "while more than one client has called in the last 10 s, a merged call holds no more than vLLM answers in "
        "this time at the pace the gateway measured on the calls before (characters, or token ids, per second of "
        "vLLM busy); `0`: bounded by `_COALESCE_MAX_ITEMS` alone. It bounds what a light client waits behind in "
        "vLLM (see [Scheduling](#scheduling-coalescing-and-fair-share))",
    )
    FAIR_SHARE = Setting(
        boolean(),
        "true",
        "with coalescing: the queue in weighted fair order between clients; `false`: first come, first served",
    )
    CLIENT_WEIGHTS = Setting(
        client_weights(),
        None,
        "positive weights by client, rendered from `spec.gateway.scheduling.clients`; needs "
        "`REWARD_GATEWAY_COALESCE=true`",
    )
    CLIENT_DEFAULT_WEIGHT = Setting(number(), "1", "the weight of a client not named in the weights")
    MODEL_REVISION = Setting(text(), None, "the model's identity in every answer: the storage URI it was loaded from")
    MODEL_DIGEST = Setting(text(), None, "the model's identity: a content digest, where the storage path names one")
    MODEL_GENERATION = Setting(
        integer(minimum=1), None, "the model's identity: the RewardModel's `metadata.generation`"
    )
    MODEL_GENERATION_FILE = Setting(
        path(),
        None,
        "the generation followed from this file instead of `_MODEL_GENERATION` (set one of the two), about every "
        "second without a restart (`reward_gateway.config.generation`); empty: null; bad content or no file keeps the "
        "last good one, with one warning. The operator mounts the `<name>-identity` ConfigMap here "
        "([Identity](#identity)). A candidate without `_CANARY_MODEL_GENERATION` follows it too",
    )
    CANARY_URL = Setting(
        url(),
        None,
        "a candidate model's vLLM (as `_UPSTREAM_URL`): a rollout; unset, every other `CANARY_` variable must be "
        "unset too",
        REWARD_MODEL,
    )
    CANARY_MODEL_NAME = Setting(
        text(),
        None,
        "the candidate's `--served-model-name`",
        REWARD_MODEL,
        note="(`REWARD_GATEWAY_MODEL_NAME`)",
    )
    CANARY_NAME = Setting(
        text(),
        None,
        "the candidate's name in metrics (`candidate` label, and `model` on its own series) and `/canary`; must "
        "differ from the stable's",
        REWARD_MODEL,
        note="(`_CANARY_MODEL_NAME` where it differs from the stable's, else `<model>-candidate`)",
    )
    CANARY_MODE = Setting(
        choice("shadow", "split"),
        "shadow",
        "`shadow`: both models score every request, the trainer gets the stable's scores; `split`: a share of the "
        "requests is answered by the candidate",
        REWARD_MODEL,
    )
    CANARY_PERCENT = Setting(
        integer(minimum=0, maximum=100),
        "0",
        "`split`: the candidate's share of requests (non-zero with `shadow` is an error), fixed for the process's "
        "life; not with `_CANARY_PERCENT_FILE`",
        REWARD_MODEL,
    )
    CANARY_PERCENT_FILE = Setting(
        path(),
        None,
        "a file holding the share instead (the operator's `<name>-rollout` ConfigMap, key `percent`, at "
        "`/etc/reward-rollout`), read about every second, a new share taken up without a restart. Content that is "
        "not an integer 0..100 (or non-zero with `shadow`), or no file, keeps the last good share (0 at start) with "
        "one warning, never a stop",
        REWARD_MODEL,
    )
    CANARY_STICKY = Setting(
        choice("group", "client"),
        "group",
        "what a split is sticky by: `group` (the request's first group, OpenRLHF's first prompt, else the "
        "request's bytes) or `client` (the client header, else the bearer token's hash, else as `group`)",
        REWARD_MODEL,
    )
    CANARY_CLIENT_HEADER = Setting(
        header_name(),
        CLIENT_HEADER,
        "the header that names the client (a training job): `client` stickiness, and during a rollout the fair "
        "share's client too (see [Scheduling](#scheduling-coalescing-and-fair-share))",
        REWARD_MODEL,
    )
    CANARY_SHADOW_WAIT_SECONDS = Setting(
        seconds(allow_zero=True),
        "2",
        "how long after the answering model the shadow model may still take before its call is cancelled (and "
        "counted as its error)",
        REWARD_MODEL,
    )
    CANARY_HALF_LIFE_SECONDS = Setting(
        seconds(allow_zero=True),
        "600",
        "half-life of the decayed window behind `/canary` and the window gauges; `0` keeps everything since start",
        REWARD_MODEL,
    )
    CANARY_CHAT_TEMPLATE_FILE = Setting(
        path(), None, "the candidate's own template file (`gateway` template mode)", REWARD_MODEL, note="(the stable's)"
    )
    CANARY_CHAT_TEMPLATE = Setting(
        text(), None, "the candidate's own inline template", REWARD_MODEL, note="(the stable's)"
    )
    CANARY_BOS_TOKEN = Setting(text(), None, "the candidate's BOS text", REWARD_MODEL, note="(the stable's)")
    CANARY_EOS_TOKEN = Setting(text(), None, "the candidate's EOS text", REWARD_MODEL, note="(the stable's)")
    CANARY_JUDGE = Setting(
        judge(), None, "the candidate's own judge (a new template is a new judge)", REWARD_MODEL, note="(the stable's)"
    )
    CANARY_MODEL_REVISION = Setting(text(), None, "the candidate's storage URI", REWARD_MODEL)
    CANARY_MODEL_DIGEST = Setting(text(), None, "the candidate's content digest", REWARD_MODEL)
    CANARY_MODEL_GENERATION = Setting(
        integer(minimum=1), None, "the candidate's generation", REWARD_MODEL, note="(the stable's)"
    )
    PIPELINE_ROLE = Setting(
        choice("actor", "reference", "critic"),
        None,
        "the gateway of an RLHFPipeline role, serving that role's routes only (see [Pipeline "
        "roles](#pipeline-roles)); its vLLM is `_UPSTREAM_URL`, its served name `_MODEL_NAME`. The settings "
        "marked *RewardModel* here are refused there. Unset: a RewardModel's gateway",
    )
    PIPELINE_REWARDS = Setting(
        pipeline_rewards(),
        None,
        "the graph's reward steps (`reward-<reward model>`) and how `/v1/pipeline/combine` and `select` weigh "
        'them, `normalise`: `"none"` or `"running"`',
        ACTOR,
        note="(required for `actor`)",
    )
    PIPELINE_BEST_OF_N = Setting(
        integer(minimum=1),
        None,
        "completions per prompt of `/v1/pipeline/candidates`; unset: that route is a 404 (no best-of-n flow)",
        ACTOR,
    )


SETTINGS: tuple[Setting[Any], ...] = tuple(value for value in vars(Env).values() if isinstance(value, Setting))
BY_NAME = {setting.name: setting for setting in SETTINGS}

_ROW = "reward_gateway.setting"  # a config field's metadata key: the row it is read from


def from_env(row: Setting[T]) -> Any:
    """A config dataclass's field read from ``row``: its default is the row's value (see read_fields)."""
    return field(default=None if row.default is None else row.value, metadata={_ROW: row})


def read_fields(cls: type[C], env: Mapping[str, str], **given: Any) -> C:
    """An instance of the config dataclass ``cls``: each field made with `from_env` read from its row,
    the others (and any named) as ``given``."""
    values = {
        f.name: f.metadata[_ROW].read(env)
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if _ROW in f.metadata and f.name not in given
    }
    return cls(**values, **given)


SCOPE_NOTE = {REWARD_MODEL: "*RewardModel.* ", ACTOR: "*The actor's.* "}
README_BEGIN = "<!-- settings: generated by `make gateway-readme` from reward_gateway.config.settings -->"
README_END = "<!-- settings: end -->"


def readme_table() -> str:
    """The README's environment table, one row per setting."""
    lines = ["| variable | default | values | meaning |", "|---|---|---|---|"]
    for setting in SETTINGS:
        accepts = setting.parse.accepts + (f", in {setting.parse.unit}" if setting.parse.unit else "")
        doc = SCOPE_NOTE.get(setting.scope, "") + setting.doc
        lines.append(f"| `{setting.env}` | {setting.shown_default()} | {accepts} | {doc} |")
    return "\n".join(lines) + "\n"


def with_table(readme: str) -> str:
    """The README with its table between the markers replaced by the generated one."""
    before, marker, rest = readme.partition(README_BEGIN)
    if not marker or README_END not in rest:
        raise ValueError(f"the README has no {README_BEGIN!r} ... {README_END!r} section")
    return before + README_BEGIN + "\n" + readme_table() + README_END + rest.split(README_END, 1)[1]


def main(argv: list[str]) -> int:
    """`python -m reward_gateway.config.settings README.md`: writes the table into that README."""
    if len(argv) != 1:
        print("usage: python -m reward_gateway.config.settings runtimes/gateway/README.md", file=sys.stderr)
        return 2
    readme = Path(argv[0])
    readme.write_text(with_table(readme.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
