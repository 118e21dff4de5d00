"""spec.judge: what the offline validation (the API server's rules, api.validation) admits and refuses of a
judge, with the words a user reads. The same cases on the real API server: e2e/tests/test_rewardmodel_schema.py."""

from __future__ import annotations

import pytest

from reward_operator.api.validation import validate
from reward_testing.judge_cases import ADMITTED, REFUSED, changed, judge_sample


def test_the_sample_judge_is_admitted():
    assert validate(judge_sample()) == []


@pytest.mark.parametrize("case", sorted(ADMITTED))
def test_a_judge_the_gateway_can_run_is_admitted(case):
    assert [(p.path, p.message) for p in validate(changed(ADMITTED[case]))] == []


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_judge_that_cannot_work_is_refused_with_what_to_fix(case):
    change, words = REFUSED[case]
    problems = [f"{p.path}: {p.message}" for p in validate(changed(change))]
    assert problems, f"{case} was admitted"
    assert any(words in problem for problem in problems), problems
