# Operator benchmarks (operator/reward_operator on a local control plane with KServe's controller).
.PHONY: bench-operator

bench: bench-operator

bench-operator: venv testenv-build ## operator vs the API server's floor at N RewardModels (BENCH_N=100,1000): convergence, latency, RSS, idle CPU, API requests
	$(PY) e2e/bench/operator_bench.py
