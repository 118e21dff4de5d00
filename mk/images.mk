# The real node's images (e2e/testenv/images): built here from the repository's own files as
# docker-archive tars in the test bed's cache; a no-op when cached. IMAGES=operator,pause builds some.
.PHONY: images

##@ The real node's images

images: venv ## build the real node's images (IMAGES=a,b: some), each run for its check
	$(TESTENV) images --check $(if $(IMAGES),--only $(IMAGES))
