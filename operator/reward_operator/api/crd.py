"""Build the CustomResourceDefinitions from the schemas in this package.

``crds/`` holds the output of :func:`all_crds`; a unit test fails when they drift.
"""

from __future__ import annotations

from typing import Any

import yaml

from . import (
    API_VERSION,
    CATEGORY,
    GROUP,
    REWARD_BATCH_KIND,
    REWARD_BATCH_PLURAL,
    REWARD_MODEL_KIND,
    REWARD_MODEL_PLURAL,
    RLHF_PIPELINE_KIND,
    RLHF_PIPELINE_PLURAL,
    VERSION,
    conditions,
)
from .schema import REWARD_BATCH, REWARD_MODEL, RLHF_PIPELINE, Schema

READY = '.status.conditions[?(@.type=="Ready")]'
SCALED_TO_ZERO = '.status.conditions[?(@.type=="ScaledToZero")]'


def _column(name: str, json_path: str, type_: str = "string", priority: int = 0, description: str = "") -> dict:
    column: dict[str, Any] = {"name": name, "type": type_, "jsonPath": json_path}
    if priority:
        column["priority"] = priority
    if description:
        column["description"] = description
    return column


def namespaced_crd(
    kind: str, plural: str, short_names: list[str], columns: list[dict[str, Any]], schema: Schema
) -> dict[str, Any]:
    """One served and stored version with a status subresource, in the ``rlhf`` category."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {
                "app.kubernetes.io/name": "reward-operator",
                "app.kubernetes.io/part-of": "reward-operator",
            },
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def reward_model_crd() -> dict[str, Any]:
    columns = [
        _column("Ready", f"{READY}.status", description="Whether the reward model serves"),
        _column("Mode", ".spec.serving.mode", description="KServe deployment mode"),
        _column("Replicas", ".status.replicas", "integer", description="Ready predictor replicas, as scaled now"),
        _column(
            "Asleep",
            f"{SCALED_TO_ZERO}.status",
            description="ScaledToZero: True while the predictor is at zero replicas (minReplicas 0 only)",
        ),
        _column("URL", ".status.url", description="Where clients reach the model"),
        _column(
            "Canary",
            ".status.canary.percent",
            "integer",
            description="The candidate's share of requests during a rollout (0 in shadow)",
        ),
        _column("Age", ".metadata.creationTimestamp", "date"),
        _column("Reason", f"{READY}.reason", priority=1),
        _column("Message", f"{READY}.message", priority=1),
        _column("Agreement", ".status.canary.agreement", "number", priority=1, description="Candidate agreement"),
    ]
    return namespaced_crd(REWARD_MODEL_KIND, REWARD_MODEL_PLURAL, ["rwm"], columns, REWARD_MODEL)


def _condition_status(condition_type: str) -> str:
    return f'.status.conditions[?(@.type=="{condition_type}")].status'


def rlhf_pipeline_crd() -> dict[str, Any]:
    columns = [
        _column("Ready", f"{READY}.status", description="Whether every role serves"),
        *(
            _column(name, _condition_status(condition), description=f"{condition}: {what}")
            for name, condition, what in (
                ("Actor", conditions.ACTOR_READY, "the actor's InferenceService"),
                ("Reference", conditions.REFERENCE_READY, "the reference's InferenceService"),
                ("Critic", conditions.CRITIC_READY, "the critic's InferenceService (empty without spec.critic)"),
                ("Rewards", conditions.REWARDS_READY, "every RewardModel in spec.rewards"),
                ("Graph", conditions.GRAPH_READY, "the InferenceGraph's router"),
            )
        ),
        _column("URL", ".status.url", description="Where clients reach the pipeline (the graph)"),
        _column("Age", ".metadata.creationTimestamp", "date"),
        _column("Reason", f"{READY}.reason", priority=1),
        _column("Message", f"{READY}.message", priority=1),
    ]
    return namespaced_crd(RLHF_PIPELINE_KIND, RLHF_PIPELINE_PLURAL, ["rlhfp"], columns, RLHF_PIPELINE)


def reward_batch_crd() -> dict[str, Any]:
    complete = f'.status.conditions[?(@.type=="{conditions.COMPLETE}")]'
    columns = [
        _column("Phase", ".status.phase", description="Pending, Queued, Running, Complete or Failed"),
        _column(
            "Progress", ".status.progress", description="Rows of the finished shards (failed among them), shards ended"
        ),
        _column("Model", ".status.model.revision", description="The revision of the weights that scored"),
        _column("Age", ".metadata.creationTimestamp", "date"),
        _column("Job", ".status.job", priority=1),
        _column("Reason", f"{complete}.reason", priority=1),
        _column("Message", f"{complete}.message", priority=1),
    ]
    return namespaced_crd(REWARD_BATCH_KIND, REWARD_BATCH_PLURAL, ["rwb"], columns, REWARD_BATCH)


def all_crds() -> dict[str, dict[str, Any]]:
    """File name in crds/ -> CRD."""
    return {
        f"{GROUP}_{REWARD_MODEL_PLURAL}.yaml": reward_model_crd(),
        f"{GROUP}_{RLHF_PIPELINE_PLURAL}.yaml": rlhf_pipeline_crd(),
        f"{GROUP}_{REWARD_BATCH_PLURAL}.yaml": reward_batch_crd(),
    }


def to_yaml(crd: dict[str, Any]) -> str:
    header = f"# Generated from reward_operator.api ({API_VERSION}) by `reward-operator crds`. Do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=120)
