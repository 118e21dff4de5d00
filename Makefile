# reward-operator: `make demo` runs it on a local control plane, `make test` tests it.
SHELL := /bin/bash
.DEFAULT_GOAL := help
# The pinned versions (VLLM_VERSION, TORCH_VERSION, KUBERNETES_VERSION, ...): their one home
include versions.env

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)/e2e:$(CURDIR)/testing
TESTENV := $(PY) -m testenv
# pytest exits 5 when a selection holds no tests; that is not a failure here.
PYTEST = $(PY) -m pytest $(1) || { rc=$$?; [ $$rc -eq 5 ] && echo "no tests selected"; [ $$rc -eq 5 ]; }

.PHONY: help venv lint unit integration chaos keda-test keda-build test bench testenv-build up down status kubeconfig demo demo-down crds clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

venv: $(VENV)/.installed ## Python virtual environment with the package and its test tools

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test,gateway,docs]'
	touch $@

lint: venv ## ruff, and the import contracts between layers (pyproject.toml, [tool.importlinter])
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

unit: venv testenv-build ## unit tests (no cluster; the chart and rule tests use the built helm and promtool)
	$(call PYTEST,-m "not integration" $(addprefix --ignore=,$(OPT_IN_SUITES)))

testenv-build: venv ## build the testenv binaries into the cache, all but KEDA's (no-op when cached; `up` and `demo` build only what they run)
	$(TESTENV) build

# KEDA's own test (hand-made ScaledObjects and scalers, 0 -> 1 -> 3 -> 0, polled and pushed) runs
# on `make keda-test`: `make test` runs KEDA through the operator's objects (scale-to-zero) instead.
# test_real_node_wake.py: wake from zero on the real node (`make wake-real`), two cold starts of vLLM
# (12-13 min); test_real_node_canary.py: a canary rollout on real scores (`make canary-real`), three cold
# starts of vLLM, two of them side by side; test_real_node_operator_pod.py: the operator installed by its
# chart as a pod on the real node (`make operator-pod`), two cold starts of vLLM; test_real_node_prometheus.py:
# Prometheus through prometheus-operator on the real node (`make prometheus-real`), their builds and one vLLM;
# test_real_node_network_policy.py: allowedClients enforced by kube-router (`make network-policy-real`), its build;
# test_real_node_pipeline.py: an RLHFPipeline through KServe's router as a pod (`make pipeline-real`), five vLLMs.
OPT_IN_SUITES = e2e/tests/test_keda.py e2e/tests/test_real_node_wake.py e2e/tests/test_real_node_canary.py \
	e2e/tests/test_real_node_operator_pod.py e2e/tests/test_real_node_rewards_chart.py \
	e2e/tests/test_real_node_prometheus.py e2e/tests/test_real_node_network_policy.py \
	e2e/tests/test_real_node_pipeline.py
# The chaos, fuzz and scale-to-zero suites run on targets of their own (in `make test` too), with
# -s: their counts and times (objects, restarts, generated specs, wake-up) are printed into the log.
OWN_TARGET_SUITES = e2e/tests/test_chaos.py e2e/tests/test_fuzz_rewardmodel.py e2e/tests/test_validation_differential.py \
	e2e/tests/test_rewardmodel_scale_to_zero.py \
	e2e/tests/test_real_node_host.py

# There is one real node per machine (it changes the host): the suites that run beside another
# control plane, or need no real pod, leave it out.
NO_NODE := TESTENV_NODE=0

integration: venv testenv-build host-packages ## integration and e2e tests on a fresh local control plane (chaos and fuzz: their own targets)
	$(call PYTEST,-m integration $(addprefix --ignore=,$(OPT_IN_SUITES) $(OWN_TARGET_SUITES)))

chaos: venv testenv-build ## chaos tests: operator kill -9, kube-apiserver and etcd restarts, a stalled watch, peering
	$(NO_NODE) $(PY) -m pytest e2e/tests/test_chaos.py -q -s

keda-build: venv ## build KEDA's operator and metrics API server into the testenv cache (waits for a build already running)
	$(TESTENV) build --only keda

keda-test: venv keda-build ## build KEDA into the testenv cache and run its test (a ScaledObject scaling a Deployment 0 -> 1 -> 3 -> 0)
	$(NO_NODE) $(PY) -m pytest e2e/tests/test_keda.py -q -s

.PHONY: scale-to-zero
scale-to-zero: venv testenv-build keda-build ## a RewardModel at zero with KServe's controller, KEDA and the operator: a burst wakes it, load scales it, idle puts it back to 0
	$(NO_NODE) $(PY) -m pytest e2e/tests/test_rewardmodel_scale_to_zero.py -q -s

# The same wake on the real node, nothing standing in: KServe's storage initializer, the pinned vLLM's CPU
# build and the gateway in containerd, KEDA beside them (TESTENV_KEDA=1). Not in `make test`: the vLLM
# image's import into containerd (about 3 min) and two cold starts of vLLM on 2 cores; OpenRLHF's part
# needs its venv, which the target builds (a no-op when built; the test fails without it here).
.PHONY: wake-real
wake-real: venv testenv-build keda-build host-packages ## a RewardModel at zero on the real node: a burst of 64 wakes the real vLLM (timeline printed), then OpenRLHF's retry loop meets 503s from zero
	TRAINER=openrlhf e2e/trainers/venvs/install.sh
	REWARD_OPERATOR_REQUIRE_TRAINERS=1 TESTENV_KEDA=1 $(PY) -m pytest e2e/tests/test_real_node_wake.py -q -s \
		-p no:cacheprovider --timeout=3600

# A rollout (spec.canary) on the real node, nothing standing in: KServe's canary predictor and the stable
# one, each a vLLM CPU build serving a tiny model, the gateway comparing their real scores, the operator
# moving the share. Not in `make test`: the vLLM image's import and three cold starts of vLLM, two of them
# side by side on the node's 2 cores.
.PHONY: canary-real
canary-real: venv testenv-build host-packages vllm-venv ## a canary on the real node: the stable weights as candidate step up to RolloutComplete and are promoted; other weights are rolled back (figures printed)
	$(PY) -m pytest e2e/tests/test_real_node_canary.py -q -s -p no:cacheprovider --timeout=3600

# The operator as a pod on the real node, installed by `helm install` of charts/reward-operator with the image
# built here, its ServiceAccount's RBAC enforced by the API server and no operator on the host; Pod Security's
# restricted level enforced where it and the RewardModels run. Not in `make test`: the vLLM image's import and
# two cold starts of vLLM (a RewardModel scored, then one held back by a verb taken from the ClusterRole).
.PHONY: operator-pod
operator-pod: venv testenv-build host-packages vllm-venv ## the operator installed by its chart as a pod on the real node: RBAC and restricted enforced, a model scored, helm test, a verb removed, the pod and its process killed (figures printed)
	$(PY) -m pytest e2e/tests/test_real_node_operator_pod.py e2e/tests/test_real_node_rewards_chart.py -q -s \
		-p no:cacheprovider --timeout=3600

# Prometheus for real: prometheus-operator (built from its Go module) turns the chart's ServiceMonitor, PodMonitor
# and PrometheusRule into the configuration of a Prometheus (promtool's release) it runs on the real node, which
# scrapes the operator pod, a gateway and vLLM. Not in `make test`: their builds and a cold start of vLLM.
.PHONY: prometheus-real
prometheus-real: venv testenv-build host-packages vllm-venv ## Prometheus by prometheus-operator on the real node: the chart's monitors scraped (operator pod, gateway, vLLM), its alert rules evaluated, every dashboard query answered
	$(TESTENV) build --only prometheus,prometheus-operator
	TESTENV_PROMETHEUS=1 $(PY) -m pytest e2e/tests/test_real_node_prometheus.py -q -s -p no:cacheprovider --timeout=3600

# gateway.allowedClients enforced: kube-router's firewall (built from its Go module) on the real node refuses what
# the operator's NetworkPolicies refuse. Not in `make test`: kube-router's build and a cold start of vLLM.
.PHONY: network-policy-real
network-policy-real: venv testenv-build host-packages ## allowedClients enforced on the real node by kube-router: the listed pod scores, others are refused, only the gateway reaches vLLM, KEDA's namespace reaches the scaler port, removal opens it
	$(TESTENV) build --only kube-router
	TESTENV_KUBE_ROUTER=1 $(PY) -m pytest e2e/tests/test_real_node_network_policy.py -q -s -p no:cacheprovider --timeout=3600

# An RLHFPipeline that generates: KServe's router as a pod (its image built from the pinned module's cmd/router),
# a tiny causal LM as actor and reference, a value model as critic and two RewardModels, five vLLMs side by
# side; the reference's and the critic's numbers checked against transformers. Not in `make test`: five cold
# starts of vLLM on the node's 2 cores (the reference's and critic's parity alone runs in `make test`:
# test_real_vllm_pipeline.py).
.PHONY: pipeline-real
pipeline-real: venv testenv-build host-packages vllm-venv ## an RLHFPipeline on the real node through KServe's router pod: score, generate-and-score and best-of-n, parity with transformers, a killed role's error (figures printed)
	$(PY) -m pytest e2e/tests/test_real_node_pipeline.py -q -s -p no:cacheprovider --timeout=3600

# chaos and scale-to-zero mostly wait (kopf's and KEDA's timeouts, peer lifetimes, cooldowns), each on a
# control plane of its own: they run side by side, each one's output printed whole when it ends.
test: docs lint unit node-host integration fuzz ## everything CI runs (the docs site first: it takes seconds)
	$(MAKE) --no-print-directory -j2 --output-sync=target chaos scale-to-zero

.PHONY: node-host host-packages
node-host: venv testenv-build host-packages ## the real node alone: a pod runs, then the host is as before `up` (also after an interrupted run)
	$(PY) -m pytest e2e/tests/test_real_node_host.py -q -s

# Debian's packages the real node takes from the host (runc, iptables, iproute2; nftables: `down` deletes the
# tables iptables made; ipset: kube-router's sets in `make network-policy-real`) and the image
# builder (buildah, debootstrap); installed when missing (root, as in CI).
HOST_PACKAGES := runc iptables nftables iproute2 ipset buildah debootstrap
host-packages: ## install the Debian packages the real node and the image builds need, where missing
	@missing=$$(for p in $(HOST_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing Debian's $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

.PHONY: fuzz
fuzz: venv testenv-build ## fuzz RewardModel specs on a fresh control plane with the operator, and offline validation against the API server on the same specs (500; FUZZ_EXAMPLES=5000 for more)
	$(NO_NODE) FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-500} $(PY) -m pytest e2e/tests/test_fuzz_rewardmodel.py e2e/tests/test_validation_differential.py -q -s

# Each area adds its benchmark as a prerequisite (mk/gateway.mk: bench-gateway; mk/operator.mk: bench-operator).
bench: ## every benchmark: figures and ratios, printed, never asserted

up: venv host-packages ## start the local control plane with KServe's manager, TESTENV_KSERVE=0 without (prints the KUBECONFIG to export)
	$(TESTENV) up

down: venv ## stop the local control plane and remove its state
	$(TESTENV) down

status: venv ## show the local control plane's processes
	$(TESTENV) status

kubeconfig: venv ## print the local control plane's kubeconfig path
	@$(TESTENV) kubeconfig

demo: venv host-packages vllm-venv ## control plane + operator + the sample RewardModel on kwok, then a tiny model served for real and scored
	$(PY) e2e/demo.py

crds: venv ## regenerate crds/ from reward_operator.api (then `make chart-sync` copies them into the chart)
	$(VENV)/bin/reward-operator crds --output-dir crds

# Each area adds its own targets in mk/<area>.mk (gateway, chart, ...).
-include mk/*.mk

clean: down ## remove the virtual environment and caches of this checkout
	rm -rf $(VENV) .pytest_cache .ruff_cache
