"""Which weights a model is, as the gateway tells trainers in every answer (REWARD_GATEWAY_MODEL_REVISION, _DIGEST).

The revision is the storage URI the weights were fetched from, less what only the fetch needs: the user
and password of an http(s) URI, and its query and fragment (a presigned URL's signature), since the
gateway repeats the revision to every caller in headers and JSON.

The digest is set only where the URI itself pins content, so that two answers with one digest come
from the same bytes: an OCI image by digest (``oci://repo/image@sha256:<64 hex>``) and a Hugging Face
commit (``hf://org/model:<40 hex>``, KServe's storage initializer passes what follows the colon to the
hub as the revision). A branch or tag there (``:main``, ``:v1``) moves, so it names no digest; neither
do s3, gs, pvc and http(s), whose content the URI does not fix.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

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
