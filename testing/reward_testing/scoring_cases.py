"""What the real-vLLM tests send and what transformers is asked for the same items: one source for
the local processes (e2e/tests/offline/test_real_vllm_parity.py) and the real node
(e2e/tests/node/test_real_node_rewards.py), so both check the same texts."""

from __future__ import annotations

from reward_testing.tiny_model_maker import BOS, STEP_TAG

TOLERANCE = 1e-4


def assert_close(got: list[float], want: list[float]) -> None:
    """Each score within TOLERANCE of the reference's, and as many of them."""
    assert len(got) == len(want)
    assert all(abs(g - w) <= TOLERANCE for g, w in zip(got, want, strict=True)), (got, want)


# A chat template of the spec's own (model.chatTemplate), unlike the tokenizer's: it must be the one
# applied, by vLLM (upstream) or by the gateway, and only once.
SPEC_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}### {{ message['role'] }}:\n{{ message['content'] }}\n{% endfor %}"
)

CONVERSATION = [
    {"role": "system", "content": "solve the question step by step"},
    {"role": "user", "content": "what is two plus three?"},
    {"role": "assistant", "content": "two plus three equals five. the answer is five!"},
]
PROMPT, RESPONSE = "find the sum of four and seven", "four plus seven equals ten. maybe the total is new"
STEPS = ["four plus seven", "equals ten.", "the answer is ten"]
STEPPED = "".join(step + STEP_TAG for step in STEPS)  # the gateway's rendering of steps
TAGGED = [*CONVERSATION[:2], {"role": "assistant", "content": f"two plus three{STEP_TAG}is five{STEP_TAG}"}]
# OpenRLHF's query: the policy's rendering, its BOS included, scored as given
SPEC_QUERY = f"{BOS}### user:\n{PROMPT}\n### assistant:\n{RESPONSE}\n"
OWN_QUERY = f"{BOS}<|user|>{PROMPT}<|end|><|assistant|>{RESPONSE}<|end|>"
STEPPED_QUERY = f"{BOS}<|user|>{PROMPT}<|end|><|assistant|>{STEPPED}<|end|>"


def prompt_response(prompt: str, response: str) -> list[dict]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]


# What transformers is asked, per kind: name -> item (reward_testing.tiny_models.reference_scores).
REFERENCE_ITEMS = {
    "sequence": {
        "conversation": {"messages": CONVERSATION, "chat_template": SPEC_TEMPLATE},
        "prompt_response": {"messages": prompt_response(PROMPT, RESPONSE), "chat_template": SPEC_TEMPLATE},
        "query": {"text": SPEC_QUERY},
        # verl's /classify: the RM's rendering with the BOS stripped; vLLM adds the model's own
        "verl": {"text": SPEC_QUERY.removeprefix(BOS), "add_special_tokens": True},
    },
    "token": {
        "conversation": {"messages": CONVERSATION},
        "prompt_response": {"messages": prompt_response(PROMPT, RESPONSE)},
        "query": {"text": OWN_QUERY},
    },
    "process": {
        "steps": {"messages": prompt_response(PROMPT, STEPPED)},
        "tagged": {"messages": TAGGED},
        "query": {"text": STEPPED_QUERY},
    },
}
