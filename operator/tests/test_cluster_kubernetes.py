"""What KubernetesCluster remembers between reconciles (cluster/kubernetes_cluster.py): a runtime found, and
whether a kind is served, each for a while; the API reads below it are replaced, its clock is given."""

from __future__ import annotations

from reward_operator.api import kserve
from reward_operator.cluster import KubernetesCluster, gather, objects
from reward_operator.cluster.kubernetes_cluster import SERVED_SEEN_SECONDS


def test_the_runtime_is_read_once_while_it_exists(monkeypatch):
    reads = []

    def get(api_version, kind, name, namespace=None):
        reads.append(kind)
        return {"kind": kind} if (kind, name) == (kserve.CLUSTER_SERVING_RUNTIME_KIND, "vllm-reward") else None

    monkeypatch.setattr(gather, "get", get)
    cluster = KubernetesCluster()
    assert cluster.runtime_exists("ns", "vllm-reward") and cluster.runtime_exists("ns", "vllm-reward")
    assert reads == [kserve.CLUSTER_SERVING_RUNTIME_KIND]
    assert not cluster.runtime_exists("ns", "missing") and not cluster.runtime_exists("ns", "missing")
    assert len(reads) == 1 + 4, "a runtime not found is read again each time (made later, noticed soon)"
    assert KubernetesCluster().runtime_exists("ns", "vllm-reward") and len(reads) == 5 + 1, "remembered per cluster"


def test_whether_keda_is_installed_is_read_once_a_minute(monkeypatch):
    reads = []

    def served(api_version, kind):
        reads.append((api_version, kind))
        return len(reads) > 1

    clock = [1000.0]
    monkeypatch.setattr(objects, "served", served)
    cluster = KubernetesCluster(monotonic=lambda: clock[0])
    assert cluster.serves("keda.sh/v1alpha1", "ScaledObject") is False
    clock[0] += SERVED_SEEN_SECONDS - 1
    assert cluster.serves("keda.sh/v1alpha1", "ScaledObject") is False and len(reads) == 1
    clock[0] += 2  # KEDA installed meanwhile: seen once the minute is up
    assert cluster.serves("keda.sh/v1alpha1", "ScaledObject") is True
    assert reads == [("keda.sh/v1alpha1", "ScaledObject")] * 2
