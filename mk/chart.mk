# Helm chart and install manifests (charts/reward-operator, manifests/).
.PHONY: chart-sync chart-lint chart-test image

##@ The chart and the install manifests

# resolved in the recipe, after testenv-build (PYTHONPATH is exported to recipes)
HELM = "$$($(TESTENV) bin-dir)/helm"

chart-sync: venv testenv-build ## copy crds/, runtimes/ and more into the chart; its README, manifests/base
	$(PY) charts/reward-operator/hack/sync.py --helm $(HELM) --kube-version $(KUBERNETES_VERSION)

chart-lint: venv testenv-build ## helm lint --strict of the chart, in both watch modes
	$(HELM) lint charts/reward-operator --strict --kube-version $(KUBERNETES_VERSION)
	$(HELM) lint charts/reward-operator --strict --kube-version $(KUBERNETES_VERSION) --set watch.mode=namespaces --set 'watch.namespaces={team-a}'

CHART_TESTS := e2e/tests/offline/test_chart.py e2e/tests/cluster/test_chart_install.py \
	e2e/tests/cluster/test_manifests.py e2e/tests/offline/test_monitoring.py e2e/tests/offline/test_argocd.py
chart-test: venv testenv-build ## chart, manifests, monitoring and Argo CD tests (helm, API server, Lua)
	$(PY) -m pytest $(CHART_TESTS) -q

# buildah (Debian's), no docker daemon: the test bed's recipe; `make release` pushes it (docs/release.md)
image: venv host-packages ## build the operator image (a docker-archive in the test bed's cache) and check it
	$(MAKE) --no-print-directory images IMAGES=operator
