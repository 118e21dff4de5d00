"""Several operator replicas through kopf's peering: the priority each pod takes, and how long its
keep-alive counts, which bounds a hand-over.

kopf has no leader election. Each replica writes a keep-alive record (identity, priority, lifetime)
into a peering object; the replica of the highest priority acts and the others pause. Two live
replicas of the same priority both pause (kopf warns of "conflicting operators with the same
priority"), so the pods of one Deployment, identical otherwise, need distinct priorities: each takes
one derived from its own pod name (``--priority auto``).
"""

from __future__ import annotations

import getpass
import hashlib
import os
import socket
from collections.abc import Mapping

# kopf's own variable for a replica's identity in the peering object; the chart sets it to the
# pod's name (downward API), so the record names the pod.
POD_NAME_ENV = "POD_ID"

# Seconds a replica's keep-alive record counts as alive (kopf's default is 60). A standby replica
# takes over when the acting one's record expires, so a kill -9 is handed over within this plus a
# moment; kopf renews the record 5-10 s before it expires (every 1-5 s at 10 s), as a Go
# operator's leader lease (15 s, renewed every 2 s) does.
DEFAULT_LIFETIME = 10
# Below this kopf would renew every second and a short stall of the API server would already
# hand over while the acting replica still acts.
MIN_LIFETIME = 5

# Priorities of pod names spread over 31 bits: two pods tie (and both pause until one is gone)
# about once in two billion pairs. A replica started by hand with a higher --priority still wins.
PRIORITY_BITS = 31

AUTO = "auto"


def pod_priority(pod_name: str) -> int:
    """A priority of its own for each pod name: the same name always gives the same number."""
    digest = hashlib.sha256(pod_name.encode()).digest()
    return int.from_bytes(digest[:4], "big") >> (32 - PRIORITY_BITS)


def own_identity(environ: Mapping[str, str] = os.environ) -> str:
    """This process's identity in kopf's peering: POD_ID where set (the chart's replicas), else user@host/pid.
    kopf's own default asks getpass for the user's name, which raises in a container whose UID has no passwd
    entry (our image's 65532, an arbitrary UID a platform assigns): the operator pod died at start, in the
    first run of the chart's pod on a real node. The UID stands in for the name then."""
    if environ.get(POD_NAME_ENV):
        return environ[POD_NAME_ENV]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}/{os.getpid()}"


def own_pod_name(environ: Mapping[str, str] = os.environ) -> str:
    """This replica's pod name: POD_ID where set (the chart does), else the host name (a pod's own)."""
    return environ.get(POD_NAME_ENV) or socket.gethostname()


def parse_priority(value: str) -> int | str:
    """``--priority``: an integer, or ``auto`` (from the pod's name, resolved when the operator starts)."""
    if value == AUTO:
        return AUTO
    try:
        return int(value)
    except ValueError as error:
        raise ValueError(f"an integer or {AUTO!r}, got {value!r}") from error


def resolve_priority(value: int | str, environ: Mapping[str, str] = os.environ) -> int:
    return pod_priority(own_pod_name(environ)) if value == AUTO else int(value)
