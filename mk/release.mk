# A release (e2e/release, docs/release.md): the images and the chart pushed to an OCI registry, SBOMs, signed.
.PHONY: release release-arguments release-packages release-tools

##@ Releases

# skopeo pushes the images; docker-registry is the test bed's registry (make release-real)
RELEASE_PACKAGES := skopeo docker-registry
SIGN ?= key
COSIGN_KEY ?=
REGISTRY_CA ?=

release-packages: ## Debian's skopeo and docker-registry, where missing
	@missing=$$(for p in $(RELEASE_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; fi

release-tools: venv ## helm, crane, cosign and syft of the pinned releases (cosign and syft: minutes each, once)
	$(TESTENV) build --only helm,crane,cosign,syft

# the arguments checked before any prerequisite builds (make runs a target's prerequisites in order)
release-arguments:
	@if [ -z "$(VERSION)" ] || [ -z "$(REGISTRY)" ]; then \
	  echo "usage: make release VERSION=x.y.z REGISTRY=host[:port]/path [SIGN=key COSIGN_KEY=file | SIGN=keyless]" \
	    "[REGISTRY_CA=file]; credentials in REGISTRY_USERNAME and REGISTRY_PASSWORD"; exit 2; fi

release: release-arguments venv host-packages release-packages release-tools ## VERSION=x.y.z REGISTRY=host/path [SIGN=key COSIGN_KEY=f|SIGN=keyless] [REGISTRY_CA=f]
	$(PY) -m release --version "$(VERSION)" --registry "$(REGISTRY)" --sign "$(SIGN)" \
	  $(if $(COSIGN_KEY),--cosign-key "$(COSIGN_KEY)") $(if $(REGISTRY_CA),--ca-file "$(REGISTRY_CA)")
