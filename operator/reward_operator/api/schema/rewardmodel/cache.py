"""spec.cache: a node-local copy of the model (KServe's LocalModel cache), shared per model URI.

The spec-level rules tie the cache to the model's URI, the credentials and the predictor's node selector.
"""

from __future__ import annotations

from ... import kserve
from ..common import DNS_SUBDOMAIN_PATTERN, array, obj, quantity, rule, string

CACHE_SCOPES = ("Namespace", "Cluster")
# What KServe's LocalModel download Job (its storage initializer) can fetch into a node's volume
# (an http(s):// archive is unpacked there, as for a predictor's own storage initializer):
# pvc:// is already on a volume and oci:// is mounted as a modelcar, so neither is cached.
CACHEABLE_SCHEMES = ("hf", "s3", "gs", "https", "http")

CACHE = obj(
    "A node-local copy of spec.model.uri (KServe's LocalModel cache), so a cold start reads the weights "
    "from the node instead of downloading them. One cache per model URI, shared by every RewardModel "
    "that names it (per namespace, or cluster-wide with scope: Cluster); it goes with its last user. "
    "The InferenceService is created once every node of the groups holds a copy (condition ModelCached).",
    {
        "scope": string(
            "Namespace: a LocalModelNamespaceCache shared by the RewardModels of this namespace. Cluster: a "
            "LocalModelCache shared across namespaces (its download credentials come from a ServiceAccount "
            f"in KServe's job namespace, {kserve.LOCAL_MODEL_JOB_NAMESPACE}).",
            enum=list(CACHE_SCOPES),
            default="Namespace",
        ),
        "modelSize": quantity("Space the model takes on each node's volume, e.g. 16Gi (KServe's modelSize)."),
        "nodeGroups": array(
            "LocalModelNodeGroups (cluster-scoped, made by the cluster admin) whose nodes hold a copy; the "
            "predictor runs on the first group's nodes, so spec.nodeSelector must agree with its volume's "
            "node affinity.",
            string("A LocalModelNodeGroup's name.", maxLength=63, pattern=DNS_SUBDOMAIN_PATTERN),
            minItems=1,
            maxItems=8,
            **{"x-kubernetes-list-type": "set"},
        ),
        "serviceAccountName": string(
            f"A ServiceAccount in KServe's job namespace ({kserve.LOCAL_MODEL_JOB_NAMESPACE}) whose Secrets hold the "
            "download credentials (e.g. HF_TOKEN for a gated model): the download Jobs run there, where "
            "spec.credentials' Secrets cannot be read.",
            maxLength=253,
            pattern=DNS_SUBDOMAIN_PATTERN,
        ),
    },
    required=["modelSize", "nodeGroups"],
)

# Spec-level rules (self is spec).
SPEC_RULES = [
    rule(
        "!has(self.cache) || self.model.uri.matches('^(" + "|".join(CACHEABLE_SCHEMES) + ")://')",
        "cache needs a model.uri KServe can download into a node's volume ("
        + ", ".join(f"{s}://" for s in CACHEABLE_SCHEMES)
        + "): a pvc:// model is already on a volume and an oci:// model is mounted as a modelcar",
    ),
    rule(
        "!has(self.cache) || !has(self.credentials) || !has(self.credentials.huggingFaceToken) "
        "|| has(self.cache.serviceAccountName)",
        "cache with credentials.huggingFaceToken needs cache.serviceAccountName: KServe downloads the "
        f"cache in its job namespace ({kserve.LOCAL_MODEL_JOB_NAMESPACE}), which cannot read this namespace's "
        "Secret; name a ServiceAccount there whose Secret holds HF_TOKEN",
    ),
    rule(
        f"!has(self.cache) || !has(self.nodeSelector) || !('{kserve.NODE_GROUP}' in self.nodeSelector) "
        f"|| self.nodeSelector['{kserve.NODE_GROUP}'] == self.cache.nodeGroups[0]",
        f"nodeSelector['{kserve.NODE_GROUP}'] must name cache.nodeGroups[0]: the predictor reads the "
        "cache of the first node group, on that group's nodes",
    ),
]
