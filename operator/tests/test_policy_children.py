"""Whether a stored child still holds what the operator applies."""

from __future__ import annotations

import copy

from reward_operator.policy.children import holds

MANIFEST = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {"name": "rm", "namespace": "ns", "labels": {"a": "1"}, "ownerReferences": [{"uid": "u"}]},
    "spec": {"predictor": {"minReplicas": 1, "containers": [{"name": "c", "args": ["--x"]}]}},
}


def stored() -> dict:
    found = copy.deepcopy(MANIFEST)
    found["metadata"].update(uid="s", resourceVersion="9", labels={"a": "1", "added-by-kserve": "x"})
    found["spec"]["predictor"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}  # a webhook's default
    found["status"] = {"url": "http://rm"}
    return found


def test_fields_others_add_do_not_count():
    assert holds(stored(), MANIFEST)


def test_a_changed_removed_or_reordered_field_of_ours_counts():
    changed, removed, longer = stored(), stored(), stored()
    changed["spec"]["predictor"]["minReplicas"] = 2
    del removed["metadata"]["labels"]["a"]
    longer["spec"]["predictor"]["containers"][0]["args"].append("--y")
    assert not any(holds(found, MANIFEST) for found in (changed, removed, longer))


def test_a_number_stored_as_another_type_counts_as_changed():
    found = stored()
    found["spec"]["predictor"]["minReplicas"] = "1"
    assert not holds(found, MANIFEST), "when in doubt, apply"
