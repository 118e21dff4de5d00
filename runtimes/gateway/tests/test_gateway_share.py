"""The candidate's share followed from the rollout's ConfigMap as mounted (reward_gateway.config.share): read at
start, taken up on change, and bad content kept out with one warning each."""

from __future__ import annotations

import logging

import pytest

from reward_gateway.config.share import Share, followed, parse_share
from reward_testing.projected_volume import project


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "reward_gateway"]


@pytest.mark.parametrize(("text", "mode", "share"), [("25", "split", 25), ("100\n", "split", 100), ("0", "shadow", 0)])
def test_a_share_is_an_integer_0_to_100(text, mode, share):
    assert parse_share(text, mode) == share


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("", "split"),
        ("abc", "split"),
        ("101", "split"),
        ("-5", "split"),
        ("12.5", "split"),
        ("٣", "split"),
        ("10", "shadow"),
    ],
)
def test_anything_else_is_no_share(text, mode):
    with pytest.raises(ValueError):
        parse_share(text, mode)


def test_the_file_is_read_at_start_and_a_new_share_taken_up(tmp_path):
    path = project(tmp_path, "25")
    share = followed(str(path), "split")
    assert share.percent == 25, "a gateway started mid-rollout runs the current share"
    project(tmp_path, "50")
    share.refresh()
    assert share.percent == 50


def test_bad_content_keeps_the_last_good_share_with_one_warning_each(tmp_path, caplog):
    path = project(tmp_path, "50")
    share = followed(str(path), "split")
    caplog.set_level(logging.WARNING, logger="reward_gateway")
    for bad in ("abc", "150", "-1", "", "50.5", "7" * 100):
        project(tmp_path, bad)
        share.refresh()
        share.refresh()  # the same content again: no second warning
        assert share.percent == 50, bad
    assert len(warnings(caplog)) == 6
    path.unlink()
    share.refresh()
    share.refresh()
    assert share.percent == 50 and len(warnings(caplog)) == 7 and "cannot be read" in warnings(caplog)[-1]
    project(tmp_path, "75")
    share.refresh()
    assert share.percent == 75, "good content again is taken up"


def test_a_shadow_never_takes_a_share(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="reward_gateway")
    share = followed(str(project(tmp_path, "10")), "shadow")
    assert share.percent == 0 and "shadow mode" in warnings(caplog)[0]


def test_a_missing_file_at_start_is_a_share_of_0_and_a_warning_never_a_crash(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="reward_gateway")
    share = followed(str(tmp_path / "percent"), "split")
    assert share.percent == 0 and len(warnings(caplog)) == 1


def test_without_a_file_the_share_is_fixed():
    share = Share(30)
    share.refresh()
    assert share.percent == 30
