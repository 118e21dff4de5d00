"""The fuzzer's specs (``reward_testing.fuzz_specs``), generated without a cluster: what ``make fuzz`` creates
on the API server (e2e/suites/fuzz) is the same every time, and reaches both refusal and admission."""

from __future__ import annotations

import json

from reward_testing.fuzz_specs import build, generate


def test_generation_is_reproducible_and_reaches_both_paths():
    """The same cases every time, and a mix of refused and admitted."""
    first, _ = generate(60)
    again, _ = generate(60)
    assert first == again, "derandomized generation must give the same cases"
    built = [build(case, i) for i, case in enumerate(first)]
    must = sum(1 for b in built if b.must_refuse)
    assert 0 < must < len(built), f"{must} of {len(built)} must be refused: both paths need cases"
    json.dumps([b.manifest for b in built])  # every manifest is plain JSON
