# Reward gateway targets (runtimes/gateway).
.PHONY: gateway-test bench-gateway bench-wake vllm-venv

VLLM_VENV ?= $(HOME)/.cache/reward-operator/vllm-0.33.0-venv

gateway-test: venv ## reward gateway tests (fake vLLM on a real port; vLLM args contract when a vLLM venv exists)
	$(PY) -m pytest runtimes/gateway/tests -q

bench: bench-gateway

bench-gateway: venv ## scores per second through the gateway vs straight to the backend, concurrency 64
	$(PY) e2e/bench/gateway_bench.py

bench: bench-wake

bench-wake: venv ## a burst held by the gateway while the predictor is at zero: KEDA's push, first/last answer after vLLM listens
	$(PY) e2e/bench/wake_bench.py

vllm-venv: ## cached venv with vLLM 0.33.0, whose parser checks the rendered vLLM args
	@# .complete marks a finished install: an interrupted one (disk full, network) is redone, not used half-made
	test -f $(VLLM_VENV)/.complete || { rm -rf $(VLLM_VENV) && python3 -m venv $(VLLM_VENV) \
	  && $(VLLM_VENV)/bin/pip install --quiet vllm==0.33.0 && touch $(VLLM_VENV)/.complete; }
