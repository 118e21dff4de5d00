"""docs/test-bed.md's list of suites, made from their READMEs and the Makefile (reward_testing.suites_catalogue)."""

from __future__ import annotations

import pytest

from reward_testing import suites_catalogue as catalogue


def test_the_pages_list_is_the_one_the_suites_make():
    page = catalogue.PAGE.read_text(encoding="utf-8")
    assert catalogue.with_section(page) == page, "docs/test-bed.md's list of suites drifted: run `make suites-list`"


def test_every_suite_folder_is_listed_with_a_make_alias_and_make_tests_four_apart():
    listed = {suite.name: suite for suite in catalogue.suites()}
    folders = {path.name for path in catalogue.SUITES.iterdir() if (path / "README.md").exists()}
    assert set(listed) == folders
    assert all(suite.aliases for suite in listed.values()), "a suite without a make alias"
    assert catalogue.in_make_test() == {"chaos", "fuzz", "node-host", "scale-to-zero"}
    assert listed["canary"].aliases == ("canary-real", "canary-knative-real")  # a recipe that calls suite-canary


def test_a_suite_added_appears_and_one_without_its_heading_is_named(tmp_path, monkeypatch):
    for name in ("wake", "fresh"):
        (tmp_path / name).mkdir()
    (tmp_path / "wake" / "README.md").write_text("# wake: a RewardModel woken from zero\n")
    (tmp_path / "fresh" / "README.md").write_text("# fresh: a suite added today\n")
    monkeypatch.setattr(catalogue, "SUITES", tmp_path)
    section = catalogue.section()
    assert "- [fresh](" in section and "(`make suite-fresh`): a suite added today" in section
    assert "(`make wake-real`): a RewardModel woken from zero" in section
    (tmp_path / "fresh" / "README.md").write_text("Fresh suite\n")
    with pytest.raises(ValueError, match="must open with '# <suite>: <what it shows>'"):
        catalogue.section()
