"""kopf handlers, one module per kind; importing this package registers them."""

from __future__ import annotations

from typing import Any

import kopf

from .. import metrics
from ..api import GROUP
from ..settings import SETTINGS
from . import rewardmodel  # noqa: F401  (registers the RewardModel handlers)

FINALIZER = f"{GROUP}/reward-operator"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # kopf's finalizer (present because of the drift timer) carries our name, so
    # `kubectl get -o yaml` says who holds the object; see the README's uninstall order.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Events are ours to post, on transitions only; kopf's per-handler chatter stays in logs.
    settings.posting.enabled = False
    # kopf's default watch inactivity timeout (with bookmarks) already guards
    # against silently frozen watches; server_timeout bounds each watch request.
    settings.watching.server_timeout = 300
    metrics.serve(SETTINGS.metrics_port)


@kopf.on.probe(id="ready")
def ready(**_: Any) -> bool:
    return True
