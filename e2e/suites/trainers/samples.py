"""The prompts and responses the OpenRLHF and verl cases score (TRL's are its policy's own)."""

from __future__ import annotations

from reward_testing.scoring_cases import CONVERSATION, PROMPT, RESPONSE

SAMPLES = [
    {"messages": CONVERSATION[:2], "response": CONVERSATION[2]["content"]},
    {"messages": [{"role": "user", "content": PROMPT}], "response": RESPONSE},
    {"messages": [{"role": "user", "content": "name a prime number"}], "response": "seven is prime"},
    {"messages": [{"role": "user", "content": "count to five"}], "response": "one two three four five"},
]
