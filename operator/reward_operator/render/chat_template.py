"""A chat template as a file from a ConfigMap the owner holds.

KServe v0.20 parses the merged model container as a Go text/template, so a
Jinja template passed inline (``--chat-template={{ ... }}``) makes it refuse the
InferenceService. As a mounted file it never passes through that parser, and
vLLM and the gateway read the very same bytes.
"""

from __future__ import annotations

from typing import Any

from ..api.naming import chat_template_config_map_name as config_map_name
from .metadata import child_metadata

__all__ = ["config_map", "config_map_name", "volume", "volume_mount"]

VOLUME = "chat-template"
MOUNT_DIR = "/etc/reward-model"
FILE_NAME = "chat_template.jinja"
PATH = f"{MOUNT_DIR}/{FILE_NAME}"
COMPONENT = "chat-template"


def config_map(owner: dict[str, Any], template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(owner, config_map_name(owner["metadata"]["name"]), COMPONENT),
        "data": {FILE_NAME: template},
    }


def volume(owner_name: str) -> dict[str, Any]:
    return {"name": VOLUME, "configMap": {"name": config_map_name(owner_name)}}


def volume_mount() -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": MOUNT_DIR, "readOnly": True}
