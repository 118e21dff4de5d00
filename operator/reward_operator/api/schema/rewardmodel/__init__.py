"""The RewardModel schema: the one source of its CRD, defaults, validation and typed view.

Everything a user can get wrong without the operator's help is caught here, at
the API server: structural types, enums, bounds, and CEL rules for the
cross-field checks, each with a message that says what to fix. One module per
sub-object (model, pod, serving, gateway, canary, cache), each with its own
rules; ``spec`` assembles them, ``status`` is what the operator writes.
"""

from __future__ import annotations

from ..common import kind_schema
from .gateway import GATEWAY_REQUEST_TIMEOUT_SECONDS, GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS
from .model import OWNED_VLLM_FLAGS, model_fields
from .pod import CREDENTIALS, DEFAULT_CPU_RUNTIME, DEFAULT_RUNTIME, ENV_VAR, RESOURCES, TOLERATION
from .serving import DEFAULT_SCALE_DOWN_DELAY, SERVING
from .spec import SPEC
from .status import STATUS

REWARD_MODEL = kind_schema(
    "A reward model served on KServe with vLLM for RLHF trainers.",
    SPEC,
    STATUS,
    45,
    "KServe derives Service and Deployment names from it",
)

__all__ = [
    "CREDENTIALS",
    "DEFAULT_CPU_RUNTIME",
    "DEFAULT_RUNTIME",
    "DEFAULT_SCALE_DOWN_DELAY",
    "ENV_VAR",
    "GATEWAY_REQUEST_TIMEOUT_SECONDS",
    "GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS",
    "OWNED_VLLM_FLAGS",
    "RESOURCES",
    "REWARD_MODEL",
    "SERVING",
    "SPEC",
    "STATUS",
    "TOLERATION",
    "model_fields",
]
