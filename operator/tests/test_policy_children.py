"""Whether a stored child still holds what the operator applies, and whether a change of it is news."""

from __future__ import annotations

import copy

from reward_operator.policy.children import holds, read_digest

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


def reported(ready: str, when: str) -> dict:
    found = stored()
    found["status"]["conditions"] = [{"type": "Ready", "status": ready, "lastTransitionTime": when}]
    return found


def test_a_change_only_others_read_is_no_news_to_a_reconcile():
    before, after = reported("True", "2026-12-01T05:00:00Z"), reported("True", "2026-12-01T05:00:09Z")
    after["metadata"].update(resourceVersion="10", finalizers=["inferenceservice.finalizers"])
    after["metadata"]["managedFields"] = [{"manager": "kserve-manager", "operation": "Update"}]
    after["status"]["modelStatus"] = {"transitionStatus": "UpToDate", "states": {"activeModelState": "Loaded"}}
    assert read_digest(before) == read_digest(after)


def test_a_change_a_reconcile_reads_is_news():
    base = read_digest(reported("True", "t"))
    status, address, label, spec, deleting = (reported("True", "t") for _ in range(5))
    status["status"]["conditions"][0]["status"] = "False"
    address["status"]["address"] = {"url": "http://rm.ns.svc"}
    label["metadata"]["labels"]["b"] = "2"
    spec["spec"]["predictor"]["minReplicas"] = 0
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T05:00:00Z"
    failed = reported("True", "t")
    failed["status"]["modelStatus"] = {"transitionStatus": "BlockedByFailedLoad", "lastFailureInfo": {"reason": "x"}}
    changed = (status, address, label, spec, deleting, failed)
    assert base not in {read_digest(found) for found in changed}
