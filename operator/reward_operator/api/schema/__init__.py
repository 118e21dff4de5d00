"""OpenAPI schemas of the project's kinds, one module per kind, built from ``common``."""

from .common import Schema
from .rewardbatch import REWARD_BATCH
from .rewardmodel import REWARD_MODEL
from .rlhfpipeline import RLHF_PIPELINE

__all__ = ["REWARD_BATCH", "REWARD_MODEL", "RLHF_PIPELINE", "Schema"]
