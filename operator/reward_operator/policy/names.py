"""Names KServe derives from ours, checked before KServe trips on them.

In Standard mode KServe gives each component a host ``<isvc>-<component>-<namespace>``
under its ingress domain (its default domainTemplate) and refuses a DNS label
over 63 characters: the InferenceService would fail with ReconcileFailed long
after the apply. The schema cannot see the namespace, so this is checked here.
"""

from __future__ import annotations

from ..api.kserve import DNS_LABEL_MAX, predictor_name, transformer_name


def host_label_problem(name: str, namespace: str, mode: str, gateway_enabled: bool) -> str | None:
    if mode != "Standard":
        return None  # Knative's hosts are <isvc>-<component>.<namespace>: the name's own limit covers them
    longest = transformer_name(name) if gateway_enabled else predictor_name(name)
    label = f"{longest}-{namespace}"
    if len(label) <= DNS_LABEL_MAX:
        return None
    room = DNS_LABEL_MAX - len(label) + len(name)
    return (
        f"metadata.name: KServe names this model's host {label!r} ({len(label)} characters), over the "
        f"{DNS_LABEL_MAX} a DNS label allows; in namespace {namespace} the name may have at most {max(room, 0)} "
        "characters"
    )
