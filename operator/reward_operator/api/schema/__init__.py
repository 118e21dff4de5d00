"""OpenAPI schemas of the project's kinds, one module per kind, built from ``common``."""

from .common import Schema
from .rewardmodel import REWARD_MODEL

__all__ = ["REWARD_MODEL", "Schema"]
