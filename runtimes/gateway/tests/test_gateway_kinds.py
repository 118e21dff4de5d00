"""The table of model kinds: how vLLM is asked for each kind's score, on every route."""

from __future__ import annotations

from reward_gateway.config.gateway import MODEL_KINDS
from reward_gateway.items.extract import process_score, sequence_score, token_score
from reward_gateway.items.kinds import CLASSIFY_KINDS, KINDS


def test_every_configurable_kind_has_exactly_one_entry():
    assert set(KINDS) == set(MODEL_KINDS)
    assert all(name == kind.name for name, kind in KINDS.items())


def test_sequence_models_are_asked_on_classify_for_raw_logits():
    sequence = KINDS["sequence"]
    assert (sequence.path, sequence.task, sequence.use_activation) == ("/classify", None, False)
    assert sequence.score is sequence_score
    assert sequence.request_fields() == {"use_activation": False}
    assert CLASSIFY_KINDS == ("sequence",)


def test_token_and_process_models_are_asked_on_pooling_for_token_classify():
    token, process = KINDS["token"], KINDS["process"]
    assert (token.path, token.task, token.use_activation, token.score) == (
        "/pooling",
        "token_classify",
        False,
        token_score,
    )
    # A process model's step scores are probabilities: vLLM's default activation stays on.
    assert (process.path, process.task, process.use_activation, process.score) == (
        "/pooling",
        "token_classify",
        None,
        process_score,
    )
    assert process.request_fields() == {"task": "token_classify"}
