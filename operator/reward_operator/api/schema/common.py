"""Building blocks for the CRD schemas: types, patterns and the KEP-1623 condition.

Each kind's schema (one module per kind in this package) is built from these,
so the same field always means the same thing across kinds.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

# Kubernetes' own quantity syntax ("500m", "16Gi", "2").
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def rule(expression: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"rule": expression, "message": message, **extra}


def string(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def integer(description: str, **extra: Any) -> Schema:
    return {"type": "integer", "format": "int32", "description": description, **extra}


def quantity(description: str) -> Schema:
    return {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
        "pattern": QUANTITY_PATTERN,
    }


def obj(description: str, properties: dict[str, Schema], **extra: Any) -> Schema:
    return {"type": "object", "description": description, "properties": properties, **extra}


def defaulted_obj(description: str, properties: dict[str, Schema], **extra: Any) -> Schema:
    """An object whose own default holds its fields' defaults.

    The API server checks a default against the CEL rules as it stands, without
    the nested defaults filled in, so an omitted object must default to them whole;
    taking them from the fields keeps the two from drifting apart."""
    defaults = {name: field["default"] for name, field in properties.items() if "default" in field}
    return obj(description, properties, default=defaults, **extra)


def array(description: str, items: Schema, **extra: Any) -> Schema:
    return {"type": "array", "description": description, "items": items, **extra}


def key_ref(description: str) -> Schema:
    return obj(
        description,
        {
            "name": string("Name of the object in the RewardModel's namespace.", maxLength=253),
            "key": string("Key within the object.", maxLength=253),
        },
        required=["name", "key"],
    )


# A label key (optional DNS-subdomain prefix, then a name of at most 63 characters) and value.
LABEL_KEY_MAX_LENGTH = 317
LABEL_VALUE_MAX_LENGTH = 63


def label_selector(description: str) -> Schema:
    """A metav1.LabelSelector, bounded so CEL rules over it stay within the API server's cost budget."""
    requirement = obj(
        "A label requirement: key, operator and values.",
        {
            "key": string("The label key.", maxLength=LABEL_KEY_MAX_LENGTH),
            "operator": string("How the key's value is matched.", enum=["In", "NotIn", "Exists", "DoesNotExist"]),
            "values": array(
                "Values for In and NotIn; empty for Exists and DoesNotExist.",
                {"type": "string", "maxLength": LABEL_VALUE_MAX_LENGTH},
                maxItems=64,
            ),
        },
        required=["key", "operator"],
        **{
            "x-kubernetes-validations": [
                rule(
                    "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 "
                    ": !has(self.values) || size(self.values) == 0",
                    "matchExpressions[]: operators In and NotIn need values, Exists and DoesNotExist take none",
                )
            ]
        },
    )
    return obj(
        description,
        {
            "matchLabels": {
                "type": "object",
                "description": "Labels that must all be present with these values.",
                "additionalProperties": {"type": "string", "maxLength": LABEL_VALUE_MAX_LENGTH},
                "maxProperties": 32,
            },
            "matchExpressions": array("Requirements that must all hold.", requirement, maxItems=16),
        },
        **{"x-kubernetes-map-type": "atomic"},
    )


CONDITION = obj(
    "A condition in the KEP-1623 shape.",
    {
        "type": string("Condition type, e.g. Ready.", maxLength=316),
        "status": string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
        "reason": string("CamelCase reason for the last transition.", maxLength=1024),
        "message": string("Human-readable detail.", maxLength=32768),
        "lastTransitionTime": string("When status last changed.", format="date-time"),
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "description": "Generation the condition was computed from.",
        },
    },
    required=["type", "status", "lastTransitionTime"],
)


def status_schema(conditions: str, properties: dict[str, Schema]) -> Schema:
    """A kind's status: the generation acted on, the conditions (``conditions`` says which), ``properties``."""
    return obj(
        "Observed state, written by the operator.",
        {
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "Generation of the spec the operator last acted on.",
            },
            "conditions": array(
                conditions,
                CONDITION,
                **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
            ),
            **properties,
        },
    )


def kind_schema(description: str, spec: Schema, status: Schema, max_name_length: int, names_derived: str) -> Schema:
    """A kind's whole object: its spec and status, and the rule on metadata.name that keeps the names
    KServe derives from it (``names_derived``) valid, as a Service's DNS label."""
    return obj(
        description,
        {
            "apiVersion": string("API version of this object."),
            "kind": string("Kind of this object."),
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        required=["spec"],
        **{
            "x-kubernetes-validations": [
                rule(
                    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= "
                    f"{max_name_length}",
                    "metadata.name must start with a letter, hold only lowercase letters, digits and '-', and be "
                    f"at most {max_name_length} characters: {names_derived}",
                )
            ]
        },
    )
