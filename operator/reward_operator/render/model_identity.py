"""Which model scored an answer, as the gateway tells trainers in every one: the weights' revision and digest
(REWARD_GATEWAY_MODEL_REVISION, _DIGEST), and the RewardModel's generation (REWARD_GATEWAY_MODEL_GENERATION_FILE).

The revision is the storage URI the weights were fetched from, less what only the fetch needs: the user
and password of an http(s) URI, and its query and fragment (a presigned URL's signature), since the
gateway repeats the revision to every caller in headers and JSON.

The digest is set only where the URI itself pins content, so that two answers with one digest come
from the same bytes: an OCI image by digest (``oci://repo/image@sha256:<64 hex>``) and a Hugging Face
commit (``hf://org/model:<40 hex>``, KServe's storage initializer passes what follows the colon to the
hub as the revision). A branch or tag there (``:main``, ``:v1``) moves, so it names no digest; neither
do s3, gs, pvc and http(s), whose content the URI does not fix.

The generation is not in the gateway's environment but in a ConfigMap ``<owner>-identity`` (key
``generation``) that the gateway's pods mount and follow (reward_gateway.config.generation). It moves with every
spec edit, and most change no pod (replicas, a rollout's start or gates): in the pod template it would roll
every gateway on each. The ConfigMap is rewritten in place and the kubelet projects it into the running
pods within its sync period, so an answer may carry the previous generation for about a minute. The
revision and digest change only with the model, which rolls the pods anyway, so they stay in the
environment and never lag. An offline render of a RewardModel not stored yet (no generation) writes an
empty value: the gateway answers null, not a made-up number.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..api.names import COMPONENT_LABEL
from ..api.naming import identity_config_map_name
from .gateway_container import Mounts
from .metadata import child_metadata
from .owned import Owned

# The identity's ConfigMap, and where the gateway's pods see it. Its component label sets it apart from the
# other ConfigMaps of the owner when it is pruned (once the gateway is disabled).
IDENTITY_COMPONENT = "identity"
GENERATION_KEY = "generation"
IDENTITY_VOLUME = "identity"
IDENTITY_DIR = "/etc/reward-identity"
GENERATION_PATH = f"{IDENTITY_DIR}/{GENERATION_KEY}"

_OCI_DIGEST = re.compile(r"^oci://[^@]+@(sha256:[0-9a-f]{64})$")
_HF_COMMIT = re.compile(r"^hf://[^/:]+/[^/:]+:([0-9a-f]{40})$")


def revision(uri: str) -> str:
    """The URI as the gateway may show it to any caller."""
    if not uri.startswith(("http://", "https://")):
        return uri
    parts = urlsplit(uri)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def digest(uri: str) -> str | None:
    """The content digest the URI pins, or None."""
    for pattern in (_OCI_DIGEST, _HF_COMMIT):
        if match := pattern.match(uri):
            return match.group(1)
    return None


def identity_settings(uri: str, prefix: str = "") -> dict[str, str]:
    """``{prefix}MODEL_REVISION`` and, where the URI pins one, ``{prefix}MODEL_DIGEST``."""
    settings = {f"{prefix}MODEL_REVISION": revision(uri)}
    if (pinned := digest(uri)) is not None:
        settings[f"{prefix}MODEL_DIGEST"] = pinned
    return settings


def identity_config_map(owner: dict[str, Any]) -> dict[str, Any]:
    """The RewardModel's generation as the file the gateway follows (empty where it has none yet)."""
    generation = owner["metadata"].get("generation")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(owner, identity_config_map_name(owner["metadata"]["name"]), IDENTITY_COMPONENT),
        "data": {GENERATION_KEY: "" if generation is None else str(generation)},
    }


def owned(owner: dict[str, Any]) -> tuple[Owned, ...]:
    """The identity's ConfigMap once the gateway is disabled, by its component label (a chat template's
    ConfigMap is never listed). While the gateway is on its one name is rendered: nothing to list."""
    if owner["spec"]["gateway"]["enabled"]:
        return ()
    return (Owned("v1", "ConfigMap", {COMPONENT_LABEL: IDENTITY_COMPONENT}),)


def generation_settings(owner_name: str, mounts: Mounts) -> dict[str, str]:
    """The gateway's REWARD_GATEWAY_MODEL_GENERATION_FILE, and the identity ConfigMap's volume added to ``mounts``."""
    # A directory, not a subPath: the kubelet re-projects a changed ConfigMap only into directory mounts.
    mounts.add(
        {"name": IDENTITY_VOLUME, "configMap": {"name": identity_config_map_name(owner_name)}},
        {"name": IDENTITY_VOLUME, "mountPath": IDENTITY_DIR, "readOnly": True},
    )
    return {"MODEL_GENERATION_FILE": GENERATION_PATH}
