"""ScaledToZero from the predictor's replicas: present only where the spec may go to zero."""

from __future__ import annotations

import pytest

from reward_operator.api import conditions
from reward_operator.policy.scaling import PredictorReplicas, scaled_to_zero

AT_ZERO = {"mode": "Standard", "minReplicas": 0, "maxReplicas": 4}


@pytest.mark.parametrize(
    ("serving", "replicas", "expected"),
    [
        (AT_ZERO, PredictorReplicas(ready=0, wanted=0), ("True", conditions.IDLE)),
        ({**AT_ZERO, "mode": "Knative"}, PredictorReplicas(ready=0, wanted=0), ("True", conditions.IDLE)),
        # the autoscaler asked for a replica: awake, though not serving yet
        (AT_ZERO, PredictorReplicas(ready=0, wanted=1), ("False", conditions.SCALING_UP)),
        (AT_ZERO, PredictorReplicas(ready=2, wanted=3), ("False", conditions.ACTIVE)),
        # scaled down to zero, the last pod still terminating: not asleep until it is gone
        (AT_ZERO, PredictorReplicas(ready=1, wanted=0), ("False", conditions.ACTIVE)),
        (AT_ZERO, None, ("Unknown", conditions.AWAITING_KSERVE)),
    ],
)
def test_scaled_to_zero(serving, replicas, expected):
    condition = scaled_to_zero(serving, replicas)
    assert condition is not None and condition.type == conditions.SCALED_TO_ZERO
    assert (condition.status, condition.reason) == expected
    assert condition.message


@pytest.mark.parametrize("mode", ["Standard", "Knative"])
def test_a_spec_that_never_goes_to_zero_has_no_such_condition(mode):
    serving = {"mode": mode, "minReplicas": 1, "maxReplicas": 4, "targetConcurrency": 8}
    assert scaled_to_zero(serving, PredictorReplicas(ready=1, wanted=1)) is None  # type: ignore[arg-type]
