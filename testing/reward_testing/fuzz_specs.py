"""RewardModel specs fuzzed with hypothesis, from the CRD's schema: the one generator of the fuzz
(``e2e/suites/fuzz/test_fuzz_rewardmodel.py``: what the operator makes of them) and of the differential
test (``e2e/suites/fuzz/test_validation_differential.py``: offline validation against the API server's).

Specs are built by mutating the samples in ``manifests/samples``: every node of the spec can be set
to a value the schema allows (each enum value, integer bounds, long strings), to one it must refuse
(bounds +-1, wrong types, over maxLength or maxItems, outside the pattern), or dropped;
domain-aware strategies add odd storage URIs, vLLM arguments, environment variables and references
to objects that do or do not exist; names probe the 45-character rule and KServe's 63-character host
labels. Generation is derandomized (or seeded by ``FUZZ_SEED``) with no example database, so a run
is reproducible.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import yaml
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st

from reward_operator.api.crd import reward_model_crd
from reward_operator.api.kserve import BLOCKED_ENV
from reward_operator.api.schema.rewardmodel import OWNED_VLLM_FLAGS

from .paths import REPO

SEED = os.environ.get("FUZZ_SEED")

# The spec's schema as the API server has it: the generated CRD's.
SPEC_SCHEMA = reward_model_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
SAMPLES = {
    path.name: yaml.safe_load(path.read_text())
    for path in sorted((REPO / "manifests" / "samples").glob("rewardmodel-*.yaml"))
}
# What each batch's namespace holds for specs to name (anything else is missing).
SECRET, SECRET_KEYS = "fz-secret", ("HF_TOKEN", "token")
CONFIG_MAP = "fz-config"

# ---- strategies, from the schema ------------------------------------------------------------------

DROP = object()  # a mutation that removes the field


@dataclass(frozen=True)
class Mutation:
    path: tuple[str, ...]
    value: Any  # DROP, or the new value
    must_refuse: bool  # the schema must refuse this value here, whatever else the spec holds
    note: str

    def describe(self) -> str:
        shown = "<drop>" if self.value is DROP else short(self.value)
        return f"{'.'.join(self.path)}={shown}{' (must refuse)' if self.must_refuse else ''} [{self.note}]"


@dataclass(frozen=True)
class Case:
    sample: str
    name_kind: str
    name_length: int
    mutations: tuple[Mutation, ...]
    strict: bool  # fieldValidation=Strict (kubectl's default) rather than the API's Warn


def short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


def _nodes(schema: dict, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], dict]]:
    """Every node of the spec reachable through object properties (arrays and maps are leaves)."""
    found = []
    for name, child in (schema.get("properties") or {}).items():
        found.append(((*path, name), child))
        if child.get("type") == "object" and child.get("properties"):
            found.extend(_nodes(child, (*path, name)))
    return found


NODES = _nodes(SPEC_SCHEMA)
SCHEMA_AT = {path: schema for path, schema in NODES}
REQUIRED = {(*path, name) for path, schema in [((), SPEC_SCHEMA), *NODES] for name in schema.get("required", [])}

INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _is_quantity(schema: dict) -> bool:
    return bool(schema.get("x-kubernetes-int-or-string"))


QUANTITIES = ["1", "8", "500m", "7500m", "64Gi", "100Mi", "1.5", ".5", "0", 0, 2, 64, "-1", "1e3", "1E+3", "1Ei"]
BAD_QUANTITIES = ["lots", "1.2.3", "1 Gi", "", "Gi", "1gi", "eight"]
ODD_TEXT = ["", " ", "\t", "ü", "名前", "a\nb", "{x}", "$(HOME)", "%s", "'; DROP TABLE", "\u200b", "\x00"]


def _text(max_size: int) -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=min(max_size, 40)), st.sampled_from([t for t in ODD_TEXT if len(t) <= max_size]))


def valid(schema: dict) -> st.SearchStrategy[Any]:
    """Values this node's own schema allows (cross-field rules may still refuse them)."""
    if _is_quantity(schema):
        return st.sampled_from(QUANTITIES)
    kind = schema.get("type")
    if kind == "integer":
        low, high = INT_BOUNDS[schema.get("format", "int64")]
        low, high = schema.get("minimum", low), schema.get("maximum", high)
        return st.one_of(st.sampled_from([low, high, min(low + 1, high)]), st.integers(low, high))
    if kind == "number":
        low, high = schema.get("minimum", -1e9), schema.get("maximum", 1e9)
        bounds = [high, low] if not schema.get("exclusiveMinimum") else [high]
        inside = st.floats(low, high, exclude_min=bool(schema.get("exclusiveMinimum")), allow_nan=False)
        return st.one_of(st.sampled_from(bounds), inside)
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        limit = schema.get("maxLength", 256)
        if "pattern" in schema:
            matching = st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) <= limit)
            return matching
        return st.one_of(_text(limit), st.just("x" * limit))
    if kind == "array":
        items = valid(schema["items"])
        unique_by = (lambda item: item.get("name")) if schema.get("x-kubernetes-list-map-keys") == ["name"] else None
        low, high = schema.get("minItems", 0), min(schema.get("maxItems", 4), 4)
        lists = st.lists(items, min_size=low, max_size=high, unique_by=unique_by)
        return st.one_of(lists, st.just(None)) if low == 0 else lists
    if kind == "object":
        properties = schema.get("properties") or {}
        if not properties:
            values = schema.get("additionalProperties") or {"type": "string"}
            keys = st.one_of(st.from_regex(r"^[a-z0-9]([-a-z0-9./]{0,20}[a-z0-9])?$", fullmatch=True), _text(30))
            return st.dictionaries(keys, valid(values), max_size=min(schema.get("maxProperties", 4), 4))
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {name: valid(child) for name, child in properties.items() if name in required},
            optional={name: valid(child) for name, child in properties.items() if name not in required},
        )
    return st.nothing()


def invalid(schema: dict) -> st.SearchStrategy[tuple[Any, str]]:
    """Values the schema must refuse here, each with what is wrong with it."""
    options: list[tuple[Any, str]] = []
    kind = schema.get("type")
    if _is_quantity(schema):
        options += [(q, "not a quantity") for q in BAD_QUANTITIES]
        options += [(True, "wrong type"), ([1], "wrong type"), (1.5, "wrong type")]
    elif kind == "integer":
        if "minimum" in schema:
            options.append((schema["minimum"] - 1, "below minimum"))
        if "maximum" in schema:
            options.append((schema["maximum"] + 1, "above maximum"))
        options += [("7", "wrong type"), (1.5, "wrong type"), (True, "wrong type"), ([1], "wrong type")]
    elif kind == "number":
        if "minimum" in schema:
            options.append((schema["minimum"] if schema.get("exclusiveMinimum") else -1e9, "below minimum"))
        if "maximum" in schema:
            options.append((schema["maximum"] * 2 + 1, "above maximum"))
        options += [("7", "wrong type"), (True, "wrong type"), ([1], "wrong type")]
    elif kind == "boolean":
        options += [("true", "wrong type"), (1, "wrong type")]
    elif kind == "string":
        if "enum" in schema:
            options += [(v, "not in enum") for v in ("", "other", schema["enum"][0].upper() + "x")]
        if schema.get("minLength"):
            options.append(("", "under minLength"))
        if "maxLength" in schema:
            options.append(("y" * (schema["maxLength"] + 1), "over maxLength"))
        if "pattern" in schema:
            pattern = re.compile(schema["pattern"])
            misses = ["", " ", "UPPER", "bad value", "-x", "x-", "a..b", "ü", "a/b", "x" * 300]
            options += [(m, "outside pattern") for m in misses if not pattern.fullmatch(m)]
        options += [(7, "wrong type"), (True, "wrong type"), (["x"], "wrong type"), ({"a": "b"}, "wrong type")]
    elif kind == "array":
        if "maxItems" in schema:
            over = schema["maxItems"] + 1
            item = schema["items"]
            if schema.get("x-kubernetes-list-map-keys") == ["name"]:
                filler = [{"name": f"V{i}", "value": "1"} for i in range(over)]
            elif item.get("type") == "integer":
                filler = list(range(over))
            elif item.get("type") == "string":
                filler = [f"--flag-{i}" for i in range(over)]
            else:
                filler = [{"podSelector": {}}] * over if "podSelector" in (item.get("properties") or {}) else None
            if filler is not None:
                options.append((filler, "over maxItems"))
        if schema.get("x-kubernetes-list-map-keys") == ["name"]:
            options.append(([{"name": "DUP", "value": "1"}, {"name": "DUP", "value": "2"}], "duplicate key"))
        options += [("x", "wrong type"), ({"a": 1}, "wrong type")]
    elif kind == "object":
        if not schema.get("properties"):
            options += [({"k": 7}, "wrong value type"), ({"k": ["v"]}, "wrong value type")]
        options += [("x", "wrong type"), ([], "wrong type"), (3, "wrong type")]
    return st.sampled_from(options) if options else st.nothing()


# Domain-aware values for the fields where the interesting cases are not in the schema's types.
URIS = [
    "hf://org/model", "hf://a", "s3://bucket/path/to/rm", "gs://bucket/rm", "pvc://claim/path", "pvc://claim",
    "oci://registry.local/rm:1", "hf://org/model?revision=main#x", "hf://ünïcode/ẞ", "hf://org/{{x}}",
    "s3://b/" + "p" * 2000, "hf://org/model/../../etc", "gs://b/a%20b",
]  # fmt: skip
BAD_URIS = ["ftp://models/rm", "hf:/x", "HF://org/model", "hf://a b", "", "/local/path", "hf://", "hf://x\ny", "s3:/"]
EXTRA_ARGS = [
    "--gpu-memory-utilization=0.9", "--enforce-eager", "--trust-remote-code", "--portal=1", "--model-impl=auto",
    "--max-model-len2=3", "-tp", "2", "{x}", "$(VAR)", "", " ", "ü", "--port", "--model=/x", "--dtype=half",
    "--served-model-name=other", "--override-generation-config={{x}}", "--chat-template=x", "--host=0.0.0.0",
]  # fmt: skip
REFERENCED_NAMES = [SECRET, SECRET, "missing-secret", "", "..", ".", "a/b", "UPPER", "with space", "x" * 253]
REFERENCED_KEYS = [*SECRET_KEYS, "nokey", "", "a/b"]
RUNTIMES = ["vllm-reward", "vllm-reward", "vllm-generate", "no-such-runtime", "a.b", "x" * 253]
ACCOUNTS = ["default", "missing-sa", "a.b"]
TEMPLATES = [
    "{% for m in messages %}{{ m.content }}{% endfor %}",
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}",
    "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
    "plain text, no jinja",
    "{% if %}broken",
    "",
    "ü" * 100,
    "x" * 65536,
]


# Go durations at the corners of the CEL rules that read them: sub-second parts (whole seconds only in
# Knative mode), the bounds, and past Go's range (2562047h47m16.854775807s), where cel-go's duration() fails.
DURATIONS = ["0s", "999ms", "1s", "1.5s", "1000ms", "6s", "5999ms", "1h", "60m", "3600001ms", "1h0m0.5s",
             "2562047h", "2562048h", "99999999999h", "1.5h", "0.5m"]  # fmt: skip


def _key_ref() -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({"name": st.sampled_from(REFERENCED_NAMES), "key": st.sampled_from(REFERENCED_KEYS)})


def _env_item() -> st.SearchStrategy[dict]:
    names = st.one_of(
        st.sampled_from(["HF_HOME", "VLLM_LOGGING_LEVEL", "PYTHONPATH", "X", "_x.y-z", "A" * 256]),
        st.from_regex(r"^[-._a-zA-Z][-._a-zA-Z0-9]{0,30}$", fullmatch=True),
    )
    value = st.one_of(_text(100), st.sampled_from(["{{ .Name }}", "$(HF_HOME)", "v" * 32768]))
    source = st.one_of(
        st.fixed_dictionaries({"secretKeyRef": _key_ref()}),
        st.fixed_dictionaries({"configMapKeyRef": _key_ref()}),
        st.fixed_dictionaries({"secretKeyRef": _key_ref(), "configMapKeyRef": _key_ref()}),
        st.just({}),
    )
    return st.one_of(
        st.fixed_dictionaries({"name": names, "value": value}),
        st.fixed_dictionaries({"name": names, "valueFrom": source}),
        st.fixed_dictionaries({"name": names}),
        st.fixed_dictionaries({"name": names, "value": value, "valueFrom": source}),
    )


DOMAIN: dict[tuple[str, ...], st.SearchStrategy[Any]] = {
    ("model", "uri"): st.sampled_from(URIS + BAD_URIS),
    ("model", "extraArgs"): st.lists(st.one_of(st.sampled_from(EXTRA_ARGS), _text(50)), max_size=6),
    ("model", "chatTemplate"): st.one_of(st.sampled_from(TEMPLATES), _text(200)),
    ("runtime",): st.sampled_from(RUNTIMES),
    ("env",): st.lists(_env_item(), max_size=4, unique_by=lambda item: item["name"]),
    ("credentials", "serviceAccountName"): st.sampled_from(ACCOUNTS),
    ("credentials", "huggingFaceToken"): _key_ref(),
    ("credentials", "huggingFaceToken", "name"): st.sampled_from(REFERENCED_NAMES),
    ("credentials", "huggingFaceToken", "key"): st.sampled_from(REFERENCED_KEYS),
    ("gateway", "authSecretRef"): _key_ref(),
    ("gateway", "authSecretRef", "name"): st.sampled_from(REFERENCED_NAMES),
    ("gateway", "authSecretRef", "key"): st.sampled_from(REFERENCED_KEYS),
    ("serving", "scaleDownDelay"): st.sampled_from(DURATIONS),
    ("serving", "scalingWindow"): st.sampled_from(DURATIONS),
}

OWNED_FLAG = re.compile("^--(" + "|".join(OWNED_VLLM_FLAGS) + ")(=.*)?$")


def domain_refusal(path: tuple[str, ...], value: Any) -> str | None:
    """The schema's own rules for the domain values (restated here): why it must refuse ``value``, or None."""
    if path == ("model", "uri") and not re.fullmatch(r"(hf|s3|gs|pvc|oci)://\S+", value):
        return "not a storage URI"
    if path == ("model", "extraArgs"):
        if any(OWNED_FLAG.match(arg) for arg in value):
            return "sets a flag the operator owns"
        if any("{{" in arg for arg in value):
            return "'{{' in an argument"
    if path == ("env",):
        for item in value:
            source = item.get("valueFrom")
            if item["name"] in BLOCKED_ENV:
                return f"{item['name']} is refused by KServe"
            if "value" in item and "{{" in item["value"]:
                return "'{{' in a value"
            if "value" in item and source is not None:
                return "value and valueFrom"
            if source is not None and ("secretKeyRef" in source) == ("configMapKeyRef" in source):
                return "valueFrom needs exactly one reference"
    return None


# Coherent changes of several fields at once, so that the admitted path reaches deep states.
SCENARIOS: dict[str, st.SearchStrategy[dict[tuple[str, ...], Any]]] = {
    "knative scale to zero": st.builds(
        lambda top, concurrency: {
            ("serving",): {"mode": "Knative", "minReplicas": 0, "maxReplicas": top, "targetConcurrency": concurrency}
        },
        st.integers(1, 1000),
        st.integers(1, 100000),
    ),
    # KEDA's kind is not served on the default test bed: InvalidSpec there, the oracle says so
    "standard scale to zero": st.builds(
        lambda top, concurrency, delay: {
            ("serving",): {"mode": "Standard", "minReplicas": 0, "maxReplicas": top}
            | ({"targetConcurrency": concurrency} if concurrency else {})
            | ({"scaleDownDelay": delay} if delay else {})
        },
        st.integers(1, 1000),
        st.one_of(st.none(), st.integers(1, 100000)),
        st.sampled_from([None, "1s", "90s", "10m", "1h30m"]),
    ),
    # Knative's own autoscaling settings, within its bounds (initialScale 0 is KServe's to drop or keep)
    "knative autoscaling": st.builds(
        lambda top, initial, window, delay: {
            ("serving",): {
                "mode": "Knative",
                "minReplicas": 0,
                "maxReplicas": top,
                "initialScale": min(initial, top),
                "scalingWindow": window,
                "scaleDownDelay": delay,
            }
        },
        st.integers(1, 1000),
        st.integers(0, 1000),
        st.sampled_from(["6s", "60s", "1m30s", "1h"]),
        st.sampled_from(["0s", "30s", "10m", "1h"]),
    ),
    # KEDA on a concurrency target above zero: InvalidSpec on the default test bed, as scale to zero
    "standard concurrency target": st.builds(
        lambda low, extra, concurrency, delay: {
            ("serving",): {"mode": "Standard", "minReplicas": low, "maxReplicas": low + extra}
            | {"targetConcurrency": concurrency}
            | ({"scaleDownDelay": delay} if delay else {})
        },
        st.integers(1, 999),
        st.integers(1, 1),
        st.integers(1, 100000),
        st.sampled_from([None, "1s", "2m", "2h"]),
    ),
    # CEL's duration() on the serving durations at their corners, in both modes
    "duration corners": st.builds(
        lambda mode, delay, window: {
            ("serving",): {"mode": mode, "minReplicas": 0, "maxReplicas": 3, "scaleDownDelay": delay}
            | ({"scalingWindow": window} if mode == "Knative" else {})
        },
        st.sampled_from(["Knative", "Standard"]),
        st.sampled_from(DURATIONS),
        st.sampled_from(DURATIONS),
    ),
    "cpu serving": st.just({("resources", "gpus"): 0, ("model", "tensorParallelSize"): 1}),
    "tensor parallel": st.integers(1, 64).map(lambda n: {("resources", "gpus"): n, ("model", "tensorParallelSize"): n}),
    "gateway template": st.builds(
        lambda template, eos: {
            ("model", "chatTemplate"): template,
            ("gateway", "chatTemplateMode"): "gateway",
            ("gateway", "eosToken"): eos,
        },
        st.sampled_from(TEMPLATES),
        st.sampled_from(["</s>", "", "<|eot_id|>"]),
    ),
    "process model": st.builds(
        lambda step, ids, aggregate: {
            ("model", "kind"): "process",
            ("model", "stepTagId"): step,
            ("model", "returnedTokenIds"): ids,
            ("gateway", "stepAggregate"): aggregate,
        },
        st.integers(0, 2**31 - 1),
        # the score head's [negative, positive] labels: the only value the schema admits
        st.just([0, 1]),
        st.sampled_from(["min", "last", "mean", "product"]),
    ),
    "reward token model": st.integers(0, 2**31 - 1).map(
        lambda token: {("model", "kind"): "token", ("model", "rewardTokenId"): token}
    ),
    "hugging face token": st.builds(lambda ref: {("credentials", "huggingFaceToken"): ref}, _key_ref()),
    "gateway auth": st.builds(lambda ref: {("gateway", "authSecretRef"): ref}, _key_ref()),
    # the scheduling rules' corners: coalescing or fair share off with weights or tuning, clients named twice
    "gateway scheduling": st.builds(
        lambda coalesce, fair, clients, tuned: {
            ("gateway", "scheduling"): {k: v for k, v in (("coalesce", coalesce), ("fairShare", fair)) if v is not None}
            | ({"clients": clients} if clients else {})
            | ({"maxWaitMilliseconds": 5} if tuned else {})
        },
        st.sampled_from([None, True, False]),
        st.sampled_from([None, True, False]),
        st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["grpo", "ppo", "eval", "a b", ""]),
                    "weight": st.sampled_from([1, 3, 0.5, 0.001, 0, 1e4]),
                }
            ),
            max_size=3,
        ),
        st.booleans(),
    ),
    "service account": st.builds(lambda a: {("credentials", "serviceAccountName"): a}, st.sampled_from(ACCOUNTS)),
    "no gateway": st.just({("gateway",): {"enabled": False}}),
    # a node group of the local test bed's LocalModel setup (testenv.addons.localmodel), or none at all
    "model cache": st.builds(
        lambda scope, group: {("cache",): {"scope": scope, "modelSize": "1Gi", "nodeGroups": [group]}},
        st.sampled_from(["Namespace", "Cluster"]),
        st.sampled_from(["gpu", "no-such-group"]),
    ),
    "missing runtime": st.just({("runtime",): "no-such-runtime"}),
    "hpa range": st.builds(
        lambda low, extra, cpu: {
            ("serving", "minReplicas"): low,
            ("serving", "maxReplicas"): low + extra,
            ("resources", "cpu"): cpu,
        },
        st.integers(1, 999),
        st.integers(0, 1),
        st.sampled_from(QUANTITIES),
    ),
    "unknown field": st.sampled_from([{("surprise",): 1}, {("model", "surprise"): "x"}, {("gateway", "x"): True}]),
}


@st.composite
def mutations(draw) -> Mutation | list[Mutation]:
    category = draw(st.sampled_from(["valid"] * 5 + ["invalid"] * 2 + ["drop", "scenario", "scenario"]))
    if category == "scenario":
        note = draw(st.sampled_from(sorted(SCENARIOS)))
        changes = draw(SCENARIOS[note])
        return [Mutation(path, value, False, note) for path, value in changes.items()]
    path, schema = draw(st.sampled_from(NODES))
    if category == "drop":
        return Mutation(path, DROP, path in REQUIRED, "drop")
    if category == "invalid":
        value, why = draw(invalid(schema))
        return Mutation(path, value, True, why)
    strategy = DOMAIN.get(path)
    if strategy is not None and draw(st.booleans()):
        value = draw(strategy)
        refusal = domain_refusal(path, value)
        return Mutation(path, value, refusal is not None, refusal or "domain value")
    return Mutation(path, draw(valid(schema)), False, "schema value")


# metadata.name: the kind of name and its length (the index makes it unique).
NAME_KINDS = ["plain"] * 8 + ["length"] * 4 + ["digit-first", "upper", "dot", "trailing-dash", "too-long"]


@st.composite
def cases(draw) -> Case:
    sample = draw(st.sampled_from(sorted(SAMPLES)))
    name_kind = draw(st.sampled_from(NAME_KINDS))
    name_length = draw(st.integers(8, 45)) if name_kind == "length" else draw(st.integers(46, 63))
    drawn: list[Mutation] = []
    for item in draw(st.lists(mutations(), max_size=4)):
        drawn.extend(item if isinstance(item, list) else [item])
    return Case(sample, name_kind, name_length, tuple(drawn), draw(st.booleans()))


def generate(count: int) -> tuple[list[Case], str]:
    """``count`` cases from hypothesis's generate phase, reproducibly; and how they were seeded."""
    found: list[Case] = []
    options = dict(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        derandomize=SEED is None,
        suppress_health_check=list(HealthCheck),
    )

    @hypothesis.settings(**options)
    @given(cases())
    def collect(case: Case) -> None:
        found.append(case)

    if SEED is not None:
        collect = hypothesis.seed(int(SEED))(collect)
    collect()
    return found[:count], (f"seed {SEED}" if SEED is not None else "derandomize=True (seed derived from the test)")


# ---- building a manifest ---------------------------------------------------------------------------


def _name(case: Case, index: int) -> str:
    base = f"fz-{index}"
    if case.name_kind == "length" or case.name_kind == "too-long":
        return (base + "n" * case.name_length)[: max(case.name_length, len(base))]
    return {
        "plain": base,
        "digit-first": f"{index}-fz",
        "upper": f"Fz-{index}",
        "dot": f"fz.{index}",
        "trailing-dash": f"{base}-",
    }[case.name_kind]


def _apply(spec: dict, mutation: Mutation) -> bool:
    """Apply one mutation; False when an earlier one left no object to hold it."""
    node = spec
    *parents, leaf = mutation.path
    for key in parents:
        if key not in node and mutation.value is not DROP:
            node[key] = {}
        node = node.get(key)
        if not isinstance(node, dict):
            return False
    if mutation.value is DROP:
        node.pop(leaf, None)
        return True
    node[leaf] = copy.deepcopy(mutation.value)
    return True


def _still_holds(spec: dict, mutation: Mutation) -> bool:
    """A must-refuse mutation counts only if a later one did not overwrite or remove it."""
    node: Any = spec
    *parents, leaf = mutation.path
    for key in parents:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    if not isinstance(node, dict):
        return False
    if mutation.value is DROP:
        return leaf not in node
    return leaf in node and node[leaf] == mutation.value


@dataclass
class Built:
    index: int
    case: Case
    manifest: dict
    must_refuse: list[str] = field(default_factory=list)


def build(case: Case, index: int) -> Built:
    manifest = copy.deepcopy(SAMPLES[case.sample])
    manifest["metadata"] = {"name": _name(case, index), "labels": {"fuzz.rlhf.dev/index": str(index)}}
    spec = manifest["spec"]
    applied = [m for m in case.mutations if _apply(spec, m)]
    must = [m.describe() for m in applied if m.must_refuse and _still_holds(spec, m)]
    if case.strict and any(m.note == "unknown field" and _still_holds(spec, m) for m in applied):
        must.append("unknown field with fieldValidation=Strict")
    name = manifest["metadata"]["name"]
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 45:
        must.append(f"metadata.name={name!r}")
    return Built(index, case, manifest, must)
