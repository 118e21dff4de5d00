# The documentation site (MkDocs with Material, pinned in pyproject.toml's `docs` extra) and the
# API reference generated from the CRDs. The site's pages are docs/, plus the README,
# ARCHITECTURE.md and the component READMEs as they are (docs/_hooks/repo_pages.py).
# `make test`, and so CI, builds the site first.
.PHONY: docs api-reference suites-list

##@ The documentation

# NO_MKDOCS_2_WARNING: Material prints a banner about its successor on every build.
docs: venv ## the site into site/, strictly: a broken link, a page off the nav fails
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

api-reference: venv ## regenerate docs/reference/ from the CRDs (a unit test fails on drift)
	$(PY) -m reward_operator.api.reference docs/reference

suites-list: ## regenerate docs/test-bed.md's list of suites from their READMEs and the Makefile (a test fails on drift)
	$(PYTHON) -m reward_testing.suites_catalogue docs/test-bed.md
