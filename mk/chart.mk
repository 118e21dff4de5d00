# Helm chart and install manifests (charts/reward-operator, manifests/).
.PHONY: chart-sync chart-lint chart-test image

CONTAINER_TOOL ?= docker
IMAGE ?= reward-operator:0.1.0
# resolved in the recipe, after testenv-build (PYTHONPATH is exported to recipes)
HELM = "$$($(TESTENV) bin-dir)/helm"

chart-sync: venv testenv-build ## copy crds/, runtimes/, dashboard and rules into the chart; regenerate its README and manifests/base
	$(PY) charts/reward-operator/hack/sync.py --helm $(HELM) --kube-version $(KUBERNETES_VERSION)

chart-lint: venv testenv-build ## helm lint --strict of the chart, in both watch modes
	$(HELM) lint charts/reward-operator --strict --kube-version $(KUBERNETES_VERSION)
	$(HELM) lint charts/reward-operator --strict --kube-version $(KUBERNETES_VERSION) --set watch.mode=namespaces --set 'watch.namespaces={team-a}'

chart-test: venv testenv-build ## chart, manifests, monitoring and Argo CD tests (real helm, API server, promtool, Lua)
	$(PY) -m pytest e2e/tests/test_chart.py e2e/tests/test_manifests.py e2e/tests/test_monitoring.py e2e/tests/test_argocd.py -q

image: ## build the operator image ($(IMAGE)) with $(CONTAINER_TOOL)
	$(CONTAINER_TOOL) build -t $(IMAGE) .
