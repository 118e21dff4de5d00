"""kopf handlers, one module per kind, on one registry built from the run's settings."""

from __future__ import annotations

from typing import Any

import aiohttp
import kopf
from prometheus_client import REGISTRY, CollectorRegistry

from .. import metrics
from ..api import REWARD_BATCH_KIND, REWARD_MODEL_KIND, RLHF_PIPELINE_KIND
from ..api.names import FINALIZER, KOPF_ANNOTATION_PREFIX
from ..cluster import Cluster, KubernetesCluster
from ..settings import Settings
from . import rewardbatch_triggers, rewardmodel_triggers, rlhfpipeline_triggers

# kopf's own connections: its watches (one each, for their lifetime) and its patches of finalizers and
# annotations. kopf's session opens one connection per request in flight, without a bound, and each
# TLS connection holds a 256 KiB read buffer: a few hundred RewardModels created at once opened
# hundreds (make bench-operator, N = 300: 58 MB of buffers, and an RSS that never came down, as
# the freed buffers were scattered through the heap). Requests beyond the bound wait for a free one.
KOPF_CONNECTIONS = 16


def _bounded_session(info: kopf.ConnectionInfo) -> aiohttp.ClientSession:
    """kopf's session as kopf builds it from the login, with at most KOPF_CONNECTIONS connections."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=KOPF_CONNECTIONS, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=bool(info.trust_env),
    )


def build_registry(
    settings: Settings, metrics_registry: CollectorRegistry = REGISTRY, cluster: Cluster | None = None
) -> kopf.OperatorRegistry:
    """Every handler of the operator, configured by ``settings``, on ``cluster`` (the API server's by default)."""
    registry = kopf.OperatorRegistry()
    operator_metrics = metrics.OperatorMetrics(
        kinds=(REWARD_MODEL_KIND, RLHF_PIPELINE_KIND, REWARD_BATCH_KIND), registry=metrics_registry
    )
    metrics_port = settings.metrics_port

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # kopf's finalizer (present because of the drift timer) carries our name;
        # see the README's uninstall order.
        settings.persistence.finalizer = FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_ANNOTATION_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=KOPF_ANNOTATION_PREFIX, key="last-handled-configuration"
        )
        # Events are ours to post, on transitions only; kopf's per-handler chatter stays in logs.
        settings.posting.enabled = False
        # kopf's default watch inactivity timeout (with bookmarks) already guards
        # against silently frozen watches; server_timeout bounds each watch request.
        settings.watching.server_timeout = 300
        # kopf's own calls (its patches of finalizers and annotations) give up after 30 s instead of
        # 300 s on a connection that silently died, as ours do (cluster/client.py, REQUEST_TIMEOUT).
        settings.networking.request_timeout = 30
        # After its own patch (finalizer, last-handled state) kopf waits this long for the watch to bring
        # that version back before it handles the object again from an older copy. kopf's 5 s is too
        # short for a busy API server: hundreds of objects created at once got their create handler run
        # twice (make bench-operator). An event that is not the awaited version still waits at most this.
        settings.persistence.consistency_timeout = 30
        metrics.serve(metrics_port, metrics_registry)

    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
        # A registry of our own gets none of kopf's default handlers: log in as
        # the official client does (in-cluster service account, else kubeconfig).
        info = kopf.login_via_client(**kwargs)
        if info is None:
            return None
        return kopf.AiohttpSession(
            server=info.server,
            default_namespace=info.default_namespace,
            expiration=info.expiration,
            priority=info.priority,
            aiohttp_session=_bounded_session(info),
        )

    @kopf.on.probe(id="ready", registry=registry)
    def ready(**_: Any) -> bool:
        return True

    cluster = cluster or KubernetesCluster()
    rewardmodel_triggers.register(registry, settings, operator_metrics, cluster)
    rlhfpipeline_triggers.register(registry, settings, operator_metrics, cluster)
    rewardbatch_triggers.register(registry, settings, operator_metrics, cluster)
    return registry
