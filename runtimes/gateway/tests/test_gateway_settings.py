"""The settings table is the one home of every variable: the config is built from it, the README generated."""

from __future__ import annotations

from pathlib import Path

import pytest

from reward_gateway.config.gateway import GatewayConfig, load_config
from reward_gateway.config.settings import SETTINGS, ConfigError, Env, readme_table, with_table

README = Path(__file__).resolve().parents[1] / "README.md"
MINIMAL = {"REWARD_GATEWAY_UPSTREAM_URL": "http://vllm:8000", "REWARD_GATEWAY_MODEL_NAME": "rm"}


def test_the_readmes_settings_table_is_the_generated_one():
    readme = README.read_text(encoding="utf-8")
    assert readme_table() in readme, "the gateway README's settings table drifted: run `make gateway-readme`"
    assert with_table(readme) == readme, "run `make gateway-readme`"


def test_every_setting_has_one_row_and_every_default_parses():
    names = [setting.env for setting in SETTINGS]
    assert len(names) == len(set(names))
    for setting in SETTINGS:
        if setting.default is not None:
            setting.value  # noqa: B018 (a default the parser refuses would fail here, not in a pod)
        assert setting.doc and setting.parse.accepts


def test_a_config_built_without_settings_is_the_one_read_from_an_empty_environment():
    """The fields' defaults are the rows' values: one home, so the reader and the dataclass cannot disagree."""
    assert load_config(MINIMAL) == GatewayConfig(upstream_url="http://vllm:8000", model_name="rm")


def test_a_setting_in_milliseconds_is_held_in_seconds():
    assert Env.COALESCE_MAX_WAIT_MS.default == "5"
    assert GatewayConfig(upstream_url="u", model_name="m").coalesce.max_wait_s == pytest.approx(0.005)
    config = load_config({**MINIMAL, "REWARD_GATEWAY_COALESCE_MAX_WAIT_MS": "20"})
    assert config.coalesce.max_wait_s == pytest.approx(0.02)


def test_an_empty_variable_is_unset_and_a_bad_one_is_named():
    assert load_config({**MINIMAL, "REWARD_GATEWAY_MAX_ITEMS": " "}).max_items == Env.MAX_ITEMS.value
    with pytest.raises(ConfigError, match=r"REWARD_GATEWAY_COALESCE_MAX_CALL_MS='-1': expected a positive number of"):
        load_config({**MINIMAL, "REWARD_GATEWAY_COALESCE_MAX_CALL_MS": "-1"})
