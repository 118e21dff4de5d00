"""The gateway's defaults the operator copies (the Knative timeout rule, render's worst case) are the gateway's own.

The two programs never import each other, so the operator keeps a copy of the two timeouts; this test is
what keeps the copy honest.
"""

from reward_gateway.config import GatewayConfig, load_config
from reward_operator.api.schema.rewardmodel.gateway import (
    GATEWAY_REQUEST_TIMEOUT_SECONDS,
    GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS,
)

# What a gateway needs to start; every other setting left to the gateway's default.
MINIMAL_ENV = {"REWARD_GATEWAY_UPSTREAM_URL": "http://vllm:8080", "REWARD_GATEWAY_MODEL_NAME": "rm"}


def test_a_gateway_started_without_timeouts_waits_what_the_operator_assumes():
    config = load_config(MINIMAL_ENV)
    assert config.request_timeout_s == GATEWAY_REQUEST_TIMEOUT_SECONDS
    assert config.scale_from_zero_timeout_s == GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS


def test_the_gateways_config_defaults_agree_with_its_reader():
    config = GatewayConfig(upstream_url="http://vllm:8080", model_name="rm")
    assert config.request_timeout_s == GATEWAY_REQUEST_TIMEOUT_SECONDS
    assert config.scale_from_zero_timeout_s == GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS


def test_every_weighted_client_keeps_its_own_metric_series_and_its_name_fits_the_gateways():
    """spec.gateway.scheduling.clients is bounded by what the gateway labels and reads of a client's name."""
    from reward_gateway.identity import MAX_CLIENT_CHARS, MAX_CLIENT_LABELS
    from reward_operator.api.schema.rewardmodel.gateway import CLIENT_NAME_MAX_LENGTH, MAX_WEIGHTED_CLIENTS

    assert MAX_WEIGHTED_CLIENTS <= MAX_CLIENT_LABELS
    assert CLIENT_NAME_MAX_LENGTH == MAX_CLIENT_CHARS
