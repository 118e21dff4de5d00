"""Which runtime a model runs on (GPUs or the CPU), and the engine settings of a CPU replica."""

from __future__ import annotations

import copy

import pytest
import yaml

from reward_operator.api.defaults import apply_defaults
from reward_operator.policy.dependencies import Observed, missing, references
from reward_operator.render import render_reward_model, render_rlhf_pipeline
from reward_operator.render.rewardmodel import candidate_runtime, model_runtime
from reward_operator.render.runtime import (
    GENERATE,
    KV_CACHE_FLOOR_BYTES,
    POOLING,
    engine_args,
    kv_cache_bytes,
    quantity_bytes,
    runtime,
)
from reward_testing.paths import GOLDEN, REPO, golden_input

GIB = 1 << 30


@pytest.mark.parametrize(
    ("explicit", "gpus", "runner", "expected"),
    [
        (None, 1, POOLING, "vllm-reward"),
        (None, 4, POOLING, "vllm-reward"),
        (None, 0, POOLING, "vllm-reward-cpu"),
        (None, 1, GENERATE, "vllm-generate"),
        (None, 0, GENERATE, "vllm-generate-cpu"),
        ("my-runtime", 0, POOLING, "my-runtime"),  # a named runtime always wins
        ("vllm-reward", 0, POOLING, "vllm-reward"),
        ("vllm-reward-cpu", 1, POOLING, "vllm-reward-cpu"),
    ],
)
def test_the_named_runtime_wins_else_the_gpus_pick(explicit, gpus, runner, expected):
    assert runtime(explicit, gpus, runner) == expected


def test_every_default_runtime_is_shipped():
    shipped = {yaml.safe_load(path.read_text())["metadata"]["name"] for path in (REPO / "runtimes").glob("*.yaml")}
    defaults = {runtime(None, gpus, runner) for gpus in (0, 1) for runner in (POOLING, GENERATE)}
    assert defaults <= shipped


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        ("12Gi", 12 * GIB),
        ("1.5Gi", 3 * GIB // 2),
        ("8G", 8 * 10**9),
        ("8000M", 8 * 10**9),
        ("8e9", 8 * 10**9),
        ("8E9", 8 * 10**9),
        ("1E", 10**18),
        (8589934592, 8 * GIB),
        ("8589934592", 8 * GIB),
        ("512Mi", 512 << 20),
        ("2048k", 2048 * 1000),
    ],
)
def test_memory_quantities_in_bytes(quantity, expected):
    assert quantity_bytes(quantity) == expected


def test_a_malformed_quantity_is_refused():
    with pytest.raises(ValueError):
        quantity_bytes("12 GiB")


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        ("12Gi", 4 * GIB),  # (12 - 4) / 2
        ("64Gi", 30 * GIB),
        ("8Gi", 2 * GIB),
        ("6Gi", KV_CACHE_FLOOR_BYTES),  # (6 - 4) / 2 = 1Gi, the floor
        ("4Gi", KV_CACHE_FLOOR_BYTES),  # nothing left beyond the engine: the floor
        ("1Gi", KV_CACHE_FLOOR_BYTES),
        (None, KV_CACHE_FLOOR_BYTES),  # no limit to derive it from
        ("10G", (10 * 10**9 - 4 * GIB) // 2 >> 20 << 20),  # whole MiB
    ],
)
def test_the_kv_cache_is_half_of_what_the_engine_leaves_with_a_floor(memory, expected):
    assert kv_cache_bytes(memory) == expected
    assert expected % (1 << 20) == 0


def test_gpus_need_no_engine_settings():
    assert engine_args({"uri": "hf://a/b"}, {"gpus": 1, "memory": "8Gi"}, []) == []


def test_the_cpu_runs_float32_unless_the_spec_sets_a_dtype():
    assert engine_args({}, {"gpus": 0, "memory": "8Gi"}, []) == [
        "--dtype=float32",
        f"--kv-cache-memory-bytes={2 * GIB}",
    ]
    assert engine_args({"dtype": "bfloat16"}, {"gpus": 0}, []) == [f"--kv-cache-memory-bytes={GIB}"]


@pytest.mark.parametrize(
    ("model", "env"),
    [
        ({"extraArgs": ["--kv-cache-memory-bytes=512M"]}, []),
        ({"extraArgs": ["--kv-cache-memory-bytes", "512M"]}, []),
        ({}, [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"}]),
    ],
)
def test_a_spec_that_sizes_the_kv_cache_itself_keeps_its_size(model, env):
    assert engine_args(model, {"gpus": 0, "memory": "8Gi"}, env) == ["--dtype=float32"]


def cpu_reward_model(**resources) -> dict:
    reward_model = copy.deepcopy(golden_input("sequence-standard"))
    reward_model["spec"]["resources"] = {"gpus": 0, "cpu": "4", "memory": "12Gi", **resources}
    return reward_model


def predictor_model(children: list[dict]) -> dict:
    (isvc,) = [child for child in children if child["kind"] == "InferenceService"]
    return isvc["spec"]["predictor"]["model"]


def test_a_cpu_predictor_rolls_its_pods_where_a_gpu_one_replaces_them():
    (isvc,) = [c for c in render_reward_model(cpu_reward_model()) if c["kind"] == "InferenceService"]
    assert "deploymentStrategy" not in isvc["spec"]["predictor"]  # KServe's rolling update: no spare GPU needed
    (isvc,) = [c for c in render_reward_model(golden_input("sequence-standard")) if c["kind"] == "InferenceService"]
    assert isvc["spec"]["predictor"]["deploymentStrategy"] == {"type": "Recreate"}


def test_gpus_zero_renders_the_cpu_runtime_without_gpu_resources():
    model = predictor_model(render_reward_model(cpu_reward_model()))
    assert model["runtime"] == "vllm-reward-cpu"
    assert model["resources"] == {"requests": {"cpu": "4", "memory": "12Gi"}, "limits": {"cpu": "4", "memory": "12Gi"}}
    assert f"--kv-cache-memory-bytes={4 * GIB}" in model["args"]
    # the spec's own dtype, before the user's extraArgs (which may still override what the CPU needs)
    dtype = next(arg for arg in model["args"] if arg.startswith("--dtype="))
    assert dtype == "--dtype=bfloat16"  # the sample sets it
    assert model["args"].index(dtype) < model["args"].index("--kv-cache-memory-bytes=4294967296")


def test_a_named_runtime_wins_over_the_cpu_default():
    reward_model = cpu_reward_model()
    reward_model["spec"]["runtime"] = "my-cpu-runtime"
    assert predictor_model(render_reward_model(reward_model))["runtime"] == "my-cpu-runtime"
    reward_model = copy.deepcopy(golden_input("sequence-standard"))
    reward_model["spec"]["runtime"] = "vllm-reward-cpu"
    model = predictor_model(render_reward_model(reward_model))
    assert model["runtime"] == "vllm-reward-cpu"
    assert not any(arg.startswith("--kv-cache-memory-bytes") for arg in model["args"])  # on GPUs: none


def test_the_cpu_golden():
    model = predictor_model(yaml.safe_load_all((GOLDEN / "sequence-cpu.yaml").read_text()))
    assert model["runtime"] == "vllm-reward-cpu"
    assert "--dtype=float32" in model["args"]
    assert "nvidia.com/gpu" not in str(model["resources"])


def test_a_candidate_runs_on_the_runtime_of_its_own_gpus():
    reward_model = apply_defaults(copy.deepcopy(golden_input("sequence-canary-shadow")))
    assert (model_runtime(reward_model), candidate_runtime(reward_model)) == ("vllm-reward", "vllm-reward")
    reward_model["spec"]["canary"]["resources"] = {"gpus": 0, "memory": "8Gi"}
    assert candidate_runtime(reward_model) == "vllm-reward-cpu"
    (isvc,) = [c for c in render_reward_model(reward_model) if c["kind"] == "InferenceService"]
    (entry,) = isvc["spec"]["canary"]
    assert entry["predictor"]["model"]["runtime"] == "vllm-reward-cpu"
    assert f"--kv-cache-memory-bytes={2 * GIB}" in entry["predictor"]["model"]["args"]
    assert isvc["spec"]["predictor"]["model"]["runtime"] == "vllm-reward"
    reward_model["spec"]["runtime"] = "mine"
    assert candidate_runtime(reward_model) == "mine"


def test_a_knative_candidate_on_the_cpu():
    reward_model = apply_defaults(copy.deepcopy(golden_input("token-knative-canary")))
    reward_model["spec"]["canary"]["resources"] = {"gpus": 0}
    candidate = next(c for c in render_reward_model(reward_model) if c["metadata"]["name"].endswith("-canary"))
    assert candidate["spec"]["predictor"]["model"]["runtime"] == "vllm-reward-cpu"
    assert "nvidia.com/gpu" not in str(candidate["spec"]["predictor"]["model"].get("resources", {}))


def test_a_missing_cpu_runtime_is_named_with_the_field_that_picked_it():
    reward_model = apply_defaults(cpu_reward_model())
    wanted = references(reward_model, model_runtime(reward_model), candidate_runtime(reward_model))
    assert wanted.runtime == "vllm-reward-cpu" and not wanted.runtime_named
    message = missing("rlhf", wanted, Observed(runtime_found=False))
    assert message is not None
    assert "named 'vllm-reward-cpu'" in message and "spec.resources.gpus" in message
    assert "install the reward runtimes" in message


def test_a_missing_candidate_runtime_is_named():
    reward_model = apply_defaults(copy.deepcopy(golden_input("sequence-canary-shadow")))
    reward_model["spec"]["canary"]["resources"] = {"gpus": 0}
    wanted = references(reward_model, model_runtime(reward_model), candidate_runtime(reward_model))
    assert wanted.candidate_runtime == "vllm-reward-cpu"
    observed = Observed(runtime_found=True, secret_keys={"hf-token": {"HF_TOKEN"}}, candidate_runtime_found=False)
    message = missing("rlhf", wanted, observed)
    assert message is not None and "'vllm-reward-cpu'" in message and "spec.canary.resources.gpus" in message
    # the same runtime for both: looked up once
    assert references(reward_model, "vllm-reward", "vllm-reward").candidate_runtime is None


def test_pipeline_roles_on_the_cpu():
    pipeline = yaml.safe_load((GOLDEN / "pipeline" / "inputs" / "cpu.yaml").read_text())
    isvcs = {c["metadata"]["name"]: c for c in render_rlhf_pipeline(pipeline) if c["kind"] == "InferenceService"}
    runtimes = {name: isvc["spec"]["predictor"]["model"]["runtime"] for name, isvc in isvcs.items()}
    # the reference takes the actor's resources, so it is on the CPU too
    assert runtimes == {
        "ppo-cpu-actor": "vllm-generate-cpu",
        "ppo-cpu-reference": "vllm-generate-cpu",
        "ppo-cpu-critic": "vllm-reward-cpu",
    }
    critic = isvcs["ppo-cpu-critic"]["spec"]["predictor"]["model"]
    assert "--dtype=float32" in critic["args"] and f"--kv-cache-memory-bytes={GIB}" in critic["args"]
    # a reference with GPUs of its own goes back to the GPU runtime; one naming a runtime keeps it
    pipeline["spec"]["reference"] = {"resources": {"gpus": 1}}
    isvcs = {c["metadata"]["name"]: c for c in render_rlhf_pipeline(pipeline) if c["kind"] == "InferenceService"}
    assert isvcs["ppo-cpu-reference"]["spec"]["predictor"]["model"]["runtime"] == "vllm-generate"
    pipeline["spec"]["actor"]["runtime"] = "mine"
    isvcs = {c["metadata"]["name"]: c for c in render_rlhf_pipeline(pipeline) if c["kind"] == "InferenceService"}
    assert isvcs["ppo-cpu-reference"]["spec"]["predictor"]["model"]["runtime"] == "mine"  # inherited
