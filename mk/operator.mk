# Operator benchmarks (operator/reward_operator on a local control plane with KServe's controller).
.PHONY: bench-operator

##@ Operator benchmarks

bench: bench-operator

bench-operator: venv testenv-build ## the operator vs the API server's floor at N RewardModels (BENCH_N)
	$(PY) e2e/bench/operator_bench.py
