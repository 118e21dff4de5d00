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

.PHONY: help venv demo demo-plane test test-steps toolchain lint unit integration testenv-build keda-build \
	host-packages up down status kubeconfig crds bench clean

##@ Start here

help: ## this list, by section
	@awk 'BEGIN {FS = ":.*## "} /^##@ / {printf "\n%s\n", substr($$0, 5)} \
	  /^[a-z%-]+:.*## / {printf "  %-21s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(VENV)/.installed ## the Python venv: the package and its test tools

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test,gateway,docs]'
	touch $@

# On a fresh machine `make demo` and `make test` build what they run, side by side: the Go builds keep both
# cores busy, the images and vLLM's venv are mostly downloads. Each prints where its minutes go as it goes.
demo: venv host-packages ## the control plane, the operator, a sample RewardModel; a tiny model scored
	@# vLLM's venv (the tiny model and transformers' number) beside the control plane's binaries and images
	$(MAKE) --no-print-directory -j2 vllm-venv demo-plane
	$(PY) e2e/demo.py

# the demo's control plane (KServe and the real node, not Knative's add-on), built and started
demo-plane: venv host-packages
	$(PY) e2e/demo.py --plane-only

test: export REWARD_OPERATOR_REQUIRE_VLLM := 1
test: toolchain ## everything CI runs (.ci/run), what it runs on built first
	@# KEDA's build, needed only by scale-to-zero (the last step), niced beside the steps (mk/keda-beside.sh)
	bash mk/keda-beside.sh $(MAKE) --no-print-directory test-steps

# chaos and scale-to-zero mostly wait (kopf's and KEDA's timeouts, peer lifetimes, cooldowns), each on a
# control plane of its own: they run side by side, each one's output printed whole when it ends.
test-steps: docs lint unit node-host integration fuzz
	$(MAKE) --no-print-directory -j2 --output-sync=target chaos scale-to-zero

# The pinned vLLM checks the rendered vLLM args and the metric names we alert on (REWARD_OPERATOR_REQUIRE_VLLM:
# `make test` fails without it; a test run alone skips those and says so).
toolchain: venv host-packages ## what make test runs on: the binaries (all but KEDA's), the images, vLLM's venv
	$(MAKE) --no-print-directory -j3 testenv-build images vllm-venv

##@ Tests by level (a test's level is its folder: docs/test-bed.md)

# Offline: nothing started but local processes (a fake or a real vLLM, helm, promtool). With a cluster:
# a fresh local control plane with KServe and the real node (e2e/testenv). --level refuses a test in the
# wrong folder.
UNIT_PATHS := operator/tests runtimes/gateway/tests clients/python/tests e2e/tests/offline e2e/testenv/tests
INTEGRATION_PATHS := e2e/tests/cluster e2e/tests/node

# actionlint on the GitHub workflows (each file named, so no git work tree is needed): its own checks (expressions,
# untrusted input in run:, permissions, the actions' inputs), without its shellcheck and pyflakes passes, which it
# runs only where those happen to be installed: the same verdict on every machine
ACTIONLINT_ARGS := -no-color -shellcheck= -pyflakes= $(wildcard .github/workflows/*.yml .github/workflows/*.yaml)
lint: venv ## ruff, ruff format, the import contracts (pyproject.toml), actionlint on .github/workflows
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	@# actionlint alone built first (a no-op when cached)
	$(TESTENV) build --only actionlint
	"$$($(TESTENV) bin-dir)/actionlint" $(ACTIONLINT_ARGS)

unit: venv testenv-build ## offline tests (UNIT_PATHS): no cluster; helm, promtool and versitygw built
	$(call PYTEST,$(UNIT_PATHS) --level=offline)

integration: venv testenv-build host-packages ## on a fresh control plane with the real node (INTEGRATION_PATHS)
	$(call PYTEST,$(INTEGRATION_PATHS) --level=cluster)

##@ Suites: one folder each, e2e/suites/<name>/ (its README: what it runs, needs and takes)

# make suite-<name> runs e2e/suites/<name>; the names users know are aliases below. Per suite, where set:
# SUITE_NEEDS_<name> (targets first), SUITE_BUILD_<name> (test-bed components built first),
# SUITE_ENV_<name> (its environment), SUITE_FLAGS_<name> (pytest's flags; default -q -s),
# SUITE_RUN_<name> (a command in place of pytest).
# There is one real node a machine: a suite on a control plane beside another, or with no real pod, leaves it out.
NO_NODE := TESTENV_NODE=0
REAL_NODE := venv testenv-build host-packages
LONG := -q -s -p no:cacheprovider --timeout=3600
# Knative's add-on runs wherever the real node does; a suite that serves nothing in Knative mode leaves it out, so
# that its pods' requests (the node has 2 cores) and its start are not spent on it
NO_KNATIVE := TESTENV_KNATIVE=0
REQUIRE_TRAINERS := REWARD_OPERATOR_REQUIRE_TRAINERS=1

SUITE_NEEDS_keda := venv keda-build
SUITE_ENV_keda := $(NO_NODE)
SUITE_NEEDS_wake := $(REAL_NODE) keda-build trainer-venv-openrlhf
SUITE_ENV_wake := $(REQUIRE_TRAINERS) TESTENV_KEDA=1
SUITE_FLAGS_wake := $(LONG)
SUITE_NEEDS_canary := $(REAL_NODE) vllm-venv
SUITE_FLAGS_canary := $(LONG)
SUITE_NEEDS_operator-pod := $(REAL_NODE) vllm-venv
SUITE_ENV_operator-pod := $(NO_KNATIVE)
SUITE_FLAGS_operator-pod := $(LONG)
SUITE_NEEDS_prometheus := $(REAL_NODE) vllm-venv
SUITE_BUILD_prometheus := prometheus,prometheus-operator
SUITE_ENV_prometheus := TESTENV_PROMETHEUS=1 $(NO_KNATIVE)
SUITE_FLAGS_prometheus := $(LONG)
SUITE_NEEDS_network-policy := $(REAL_NODE)
SUITE_BUILD_network-policy := kube-router
SUITE_ENV_network-policy := TESTENV_KUBE_ROUTER=1
SUITE_FLAGS_network-policy := $(LONG)
SUITE_NEEDS_pipeline := $(REAL_NODE) vllm-venv
SUITE_FLAGS_pipeline := $(LONG)
SUITE_NEEDS_judge := $(REAL_NODE) vllm-venv
SUITE_ENV_judge := $(NO_KNATIVE)
SUITE_FLAGS_judge := $(LONG)
SUITE_NEEDS_knative := $(REAL_NODE) keda-build vllm-venv
SUITE_ENV_knative := TESTENV_KEDA=1
SUITE_FLAGS_knative := $(LONG)
SUITE_NEEDS_release := $(REAL_NODE) release-packages release-tools vllm-venv
SUITE_ENV_release := TESTENV_REGISTRY=1 $(NO_KNATIVE)
SUITE_FLAGS_release := $(LONG)
SUITE_NEEDS_batch := $(REAL_NODE) keda-build vllm-venv
SUITE_ENV_batch := TESTENV_KEDA=1 TESTENV_OBJECT_STORE=1 $(NO_KNATIVE)
SUITE_FLAGS_batch := $(LONG)
# Kueue's suite is one test of e2e/tests/cluster, which a plain `make integration` skips (its plane has no Kueue)
SUITE_NEEDS_kueue := venv testenv-build
SUITE_BUILD_kueue := kueue
SUITE_RUN_kueue = TESTENV_KUEUE=1 $(NO_NODE) $(PY) -m pytest e2e/tests/cluster/test_rewardbatch_kueue.py \
	--level=cluster -q -s -p no:cacheprovider
SUITE_NEEDS_chaos := venv testenv-build
SUITE_ENV_chaos := $(NO_NODE)
SUITE_NEEDS_fuzz := venv testenv-build
SUITE_ENV_fuzz := $(NO_NODE) FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-500}
SUITE_NEEDS_scale-to-zero := venv testenv-build keda-build
SUITE_ENV_scale-to-zero := $(NO_NODE)
SUITE_NEEDS_node-host := $(REAL_NODE)
# The timeout covers the session fixture too: the vLLM image imported (8 min on 2 busy cores), then the
# RewardModel Ready (up to 15 min); TRAINERS_SERVE=local serves it as local processes instead.
SUITE_NEEDS_trainers := $(REAL_NODE) vllm-venv trainers-venvs
SUITE_ENV_trainers := $(REQUIRE_TRAINERS)
SUITE_FLAGS_trainers := -q -p no:cacheprovider --timeout=2400
# For a lent GPU machine, which reaches nothing outside itself: no venv made, nothing installed; the
# CUDA vLLM in VLLM_PYTHON, the gateway on GATEWAY_PYTHON (e2e/suites/gpu/README.md).
GPU_CHECK_ARGS ?=
SUITE_RUN_gpu = VLLM_PYTHON="$(VLLM_PYTHON)" GATEWAY_PYTHON="$(GATEWAY_PYTHON)" $(PYTHON) \
	e2e/suites/gpu/preflight.py --pin $(VLLM_VERSION) $(GPU_CHECK_ARGS)

.SECONDEXPANSION:
suite-%: $$(SUITE_NEEDS_$$*) ## run the suite in e2e/suites/% (the names below)
	@test -d e2e/suites/$* || { echo "no suite e2e/suites/$*" >&2; exit 2; }
	$(if $(SUITE_BUILD_$*),$(TESTENV) build --only $(SUITE_BUILD_$*))
	$(or $(SUITE_RUN_$*),$(SUITE_ENV_$*) $(PY) -m pytest e2e/suites/$* $(or $(SUITE_FLAGS_$*),-q -s))

.PHONY: keda-test wake-real canary-real canary-knative-real operator-pod prometheus-real network-policy-real \
	pipeline-real judge-real release-real batch-real batch-kueue knative-real chaos fuzz scale-to-zero node-host trainers \
	gpu-check
keda-test: suite-keda ## KEDA alone: ScaledObjects scale a Deployment 0 -> 1 -> 3 -> 0
wake-real: suite-wake ## a RewardModel at zero on the real node, woken by a burst and by OpenRLHF
canary-real: suite-canary ## a canary on the real node, judged on real scores: promoted, rolled back
canary-knative-real: ## the same canary in Knative mode (its candidate a second InferenceService, all through Kourier)
	CANARY_SERVING_MODE=Knative $(MAKE) --no-print-directory suite-canary
operator-pod: suite-operator-pod ## the operator as a pod from its chart: RBAC, restricted, killed, frozen
prometheus-real: suite-prometheus ## Prometheus by prometheus-operator scrapes the chart's monitors
network-policy-real: suite-network-policy ## allowedClients enforced by kube-router on the real node
pipeline-real: suite-pipeline ## an RLHFPipeline through KServe's router pod, five vLLMs
judge-real: suite-judge ## a judge on the real node: its verdicts through status.url against transformers'
release-real: suite-release ## a release pushed, verified, installed from oci:// on the real node, upgraded under traffic
batch-real: suite-batch ## a RewardBatch on the real node: 10,240 rows in 8 shards, then again with two workers lost
batch-kueue: suite-kueue ## a RewardBatch on a Kueue queue: held with no quota, run once given (Kueue's build)
knative-real: suite-knative ## Knative mode: the other kinds; one wake through the activator and through KEDA
chaos: suite-chaos ## the operator under kill -9, API server and etcd restarts, stalls, peering
fuzz: suite-fuzz ## fuzzed RewardModel specs, online and offline (FUZZ_EXAMPLES=500)
scale-to-zero: suite-scale-to-zero ## a RewardModel at zero woken through KEDA (a fake vLLM)
node-host: suite-node-host ## the real node leaves the host as it found it
trainers: suite-trainers ## TRL's, OpenRLHF's and verl's own code against a RewardModel
gpu-check: suite-gpu ## GPU machine only: the GPU rendering on a CUDA vLLM (VLLM_PYTHON)

##@ The local control plane (e2e/testenv)

testenv-build: venv ## build the test bed's binaries (a no-op when cached; all but KEDA's)
	$(TESTENV) build

keda-build: venv ## build KEDA's operator and metrics API server (or wait for its build)
	$(TESTENV) build --only keda

# Debian's packages the real node takes from the host (runc, iptables, iproute2; nftables: `down` deletes the
# tables iptables made; ipset: kube-router's sets) and the image builder's (buildah, debootstrap).
HOST_PACKAGES := runc iptables nftables iproute2 ipset buildah debootstrap
host-packages: ## install the real node's and image builds' Debian packages, where missing
	@missing=$$(for p in $(HOST_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing Debian's $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

up: venv host-packages ## start the local control plane (its add-ons: python -m testenv up -h)
	$(TESTENV) up

down: venv ## stop it, remove its state, undo the real node's host changes
	$(TESTENV) down

status: venv ## the local control plane's processes
	$(TESTENV) status

kubeconfig: venv ## print the local control plane's kubeconfig path
	@$(TESTENV) kubeconfig

##@ Generated files, benchmarks, cleaning

crds: venv ## regenerate crds/ from reward_operator.api (then `make chart-sync`)
	$(VENV)/bin/reward-operator crds --output-dir crds

# Each area adds its benchmark as a prerequisite (mk/gateway.mk: bench-gateway; mk/operator.mk: bench-operator).
bench: ## every benchmark: figures and ratios, printed, never asserted

clean: down ## remove the virtual environment and caches of this checkout
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Each area adds its own targets in mk/<area>.mk (gateway, chart, ...), under a section of its own.
-include mk/*.mk
