"""The README and docs/ say what the code does: sample output, alert and metric names, links.

Sample output in the docs is written by hand from a run; these tests keep its shape true
to what the CRDs print, so a new printer column cannot leave a stale sample behind.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from reward_operator.api.crd import all_crds

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
# Pages a reader is sent to from the README (docs/ and the repository's other guides).
GUIDES = [README, *sorted(DOCS.rglob("*.md"))]

# `kubectl get <resource>` -> the CRD that prints it, for every name kubectl accepts.
_CRDS = {
    name: crd
    for crd in all_crds().values()
    for names in [crd["spec"]["names"]]
    for name in (names["plural"], names["singular"], *names["shortNames"])
}
_GET = re.compile(r"^\$ kubectl get (?P<resource>[a-z]+)\b(?P<args>.*)$")


def _samples() -> list[tuple[str, str, str, str]]:
    """(page, resource, arguments, header line) for each `$ kubectl get` of our kinds in a console block."""
    samples = []
    for page in GUIDES:
        lines = page.read_text().split("\n")
        for number, line in enumerate(lines[:-1]):
            match = _GET.match(line)
            if match and match["resource"] in _CRDS:
                samples.append((str(page.relative_to(REPO)), match["resource"], match["args"], lines[number + 1]))
    return samples


def _columns(crd: dict, wide: bool, all_namespaces: bool) -> list[str]:
    printed = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    names = [c["name"].upper() for c in printed if wide or not c.get("priority")]
    return ["NAMESPACE"] * all_namespaces + ["NAME", *names]


def test_the_readme_shows_a_rewardmodel_sample():
    assert any(page == "README.md" and resource in ("rewardmodels", "rwm") for page, resource, *_ in _samples())


@pytest.mark.parametrize(("page", "resource", "args", "header"), _samples())
def test_a_kubectl_get_sample_prints_the_crds_columns(page, resource, args, header):
    arguments = args.split()
    wide = "wide" in arguments or "-owide" in arguments
    all_namespaces = "-A" in arguments or "--all-namespaces" in arguments
    expected = _columns(_CRDS[resource], wide, all_namespaces)
    assert header.split() == expected, f"{page}: `kubectl get {resource}{args}` prints {expected}"


def test_the_readme_is_one_screen_and_links_every_page():
    readme = README.read_text()
    assert len(readme.splitlines()) <= 210
    for page in sorted(DOCS.rglob("*.md")):
        assert f"]({page.relative_to(REPO)})" in readme, f"README.md does not link {page.relative_to(REPO)}"


def test_the_readme_names_the_render_command_truthfully():
    readme = README.read_text()
    assert "render -f" in readme
    assert "prints every object" in readme


def test_every_alert_is_explained_on_the_monitoring_page():
    rules = yaml.safe_load((REPO / "manifests" / "prometheus" / "prometheusrule.yaml").read_text())
    alerts = [rule["alert"] for group in rules["spec"]["groups"] for rule in group["rules"] if "alert" in rule]
    monitoring = (DOCS / "monitoring.md").read_text()
    assert alerts
    for alert in alerts:
        assert f"`{alert}`" in monitoring, f"docs/monitoring.md does not explain {alert}"


def test_every_operator_metric_is_on_the_monitoring_page():
    contract = yaml.safe_load((REPO / "manifests" / "prometheus" / "metrics-contract.yaml").read_text())
    operator_metrics = [name for name, metric in contract["metrics"].items() if metric["source"] == "operator"]
    monitoring = (DOCS / "monitoring.md").read_text()
    assert operator_metrics
    for metric in operator_metrics:
        assert f"`{metric}`" in monitoring, f"docs/monitoring.md does not list {metric}"


def _repo_pages_hook():
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("repo_pages", DOCS / "_hooks" / "repo_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sites_links_follow_the_repositorys():
    hook = _repo_pages_hook()
    readme = "[Trainers](docs/trainers.md) [design](ARCHITECTURE.md#conditions) see `manifests/samples/x.yaml`"
    assert hook.rewrite_links(readme, "index.md") == (
        "[Trainers](trainers.md) [design](architecture.md#conditions) see `manifests/samples/x.yaml`"
    )
    page = "[gateway](../../runtimes/gateway/README.md#metrics) [sample](../../manifests/samples/rlhfpipeline-ppo.yaml)"
    assert hook.rewrite_links(page, "reference/rewardmodel.md") == (
        "[gateway](../gateway.md#metrics) sample (`manifests/samples/rlhfpipeline-ppo.yaml`)"
    )
    fenced = "```\n[not a link](docs/trainers.md)\n```"
    assert hook.rewrite_links(fenced, "index.md") == fenced


# The prose a reader scrolls through: the guides, the repository's READMEs, ARCHITECTURE.md
PROSE = [*GUIDES, REPO / "ARCHITECTURE.md", *sorted(REPO.glob("*/**/README.md"))]
LONGEST = 400  # characters in a line of prose or a table's cell: past it, a page reads as a wall


def _too_long(page: Path) -> list[str]:
    found, fenced = [], False
    for number, line in enumerate(page.read_text().split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        pieces = re.split(r"(?<!\\)\|", line) if line.lstrip().startswith("|") else [line]
        found += [f"{page.relative_to(REPO)}:{number} ({len(p.strip())})" for p in pieces if len(p.strip()) > LONGEST]
    return found


def test_no_line_of_prose_or_table_cell_is_over_400_characters():
    pages = [page for page in PROSE if page.relative_to(REPO).parts[0] not in (".venv", "site", "node_modules")]
    too_long = [place for page in pages for place in _too_long(page)]
    assert not too_long, f"over {LONGEST} characters (wrap the line, or move the detail out of the cell): {too_long}"
