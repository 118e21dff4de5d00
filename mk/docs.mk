# The documentation site (MkDocs with Material, pinned in pyproject.toml's `docs` extra) and the
# API reference generated from the CRDs. The site's pages are docs/, plus the README,
# ARCHITECTURE.md and the component READMEs as they are (docs/_hooks/repo_pages.py).
# `make test`, and so CI, builds the site first.
.PHONY: docs api-reference

# NO_MKDOCS_2_WARNING: Material prints a banner about its successor on every build.
docs: venv ## build the documentation site into site/, strictly: a broken link or anchor, or a page missing from the nav, fails
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

api-reference: venv ## regenerate docs/reference/ from the CRDs (operator/tests/test_api_reference.py fails when it drifts)
	$(PY) -m reward_operator.api.reference docs/reference
