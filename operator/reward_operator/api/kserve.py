"""KServe v0.20's vocabulary as the operator uses it: group/versions, kinds,
annotations, and the names KServe derives for what it creates.

Spelled once here; render, policy and cluster read them from this module.
"""

from __future__ import annotations

GROUP = "serving.kserve.io"
# Each kind's version on its own, as a watch (group, version, plural) names it.
INFERENCE_SERVICE_VERSION = "v1beta1"
INFERENCE_SERVICE_API_VERSION = f"{GROUP}/{INFERENCE_SERVICE_VERSION}"
INFERENCE_SERVICE_KIND = "InferenceService"
INFERENCE_SERVICE_PLURAL = "inferenceservices"
RUNTIME_API_VERSION = f"{GROUP}/v1alpha1"
CLUSTER_SERVING_RUNTIME_KIND = "ClusterServingRuntime"
SERVING_RUNTIME_KIND = "ServingRuntime"

# InferenceGraph (v1alpha1): KServe's router between services (cmd/router), one Deployment and Service per
# graph in Standard mode.
INFERENCE_GRAPH_VERSION = "v1alpha1"
INFERENCE_GRAPH_API_VERSION = f"{GROUP}/{INFERENCE_GRAPH_VERSION}"
INFERENCE_GRAPH_KIND = "InferenceGraph"
INFERENCE_GRAPH_PLURAL = "inferencegraphs"
# As a watch of the kind names it, with the kind: (group, version, plural, kind).
INFERENCE_SERVICE_RESOURCE = (GROUP, INFERENCE_SERVICE_VERSION, INFERENCE_SERVICE_PLURAL, INFERENCE_SERVICE_KIND)
INFERENCE_GRAPH_RESOURCE = (GROUP, INFERENCE_GRAPH_VERSION, INFERENCE_GRAPH_PLURAL, INFERENCE_GRAPH_KIND)
# The one node every graph must have; the router starts there (v1alpha1.GraphRootNodeName).
GRAPH_ROOT_NODE = "root"
# A Sequence step with exactly this data is sent the previous step's answer; any other value (or none)
# resends the graph's original request.
GRAPH_PREVIOUS_RESPONSE = "$response"

# LocalModel (v1alpha1): a node-local cache of a model URI, bound to an InferenceService by KServe's
# defaulting webhook at admission when its storageUri is (under) the cache's sourceModelUri.
LOCAL_MODEL_VERSION = "v1alpha1"
LOCAL_MODEL_API_VERSION = f"{GROUP}/{LOCAL_MODEL_VERSION}"
LOCAL_MODEL_CACHE_KIND = "LocalModelCache"  # cluster-scoped
LOCAL_MODEL_NAMESPACE_CACHE_KIND = "LocalModelNamespaceCache"  # namespaced; takes precedence at binding
LOCAL_MODEL_NODE_GROUP_KIND = "LocalModelNodeGroup"  # cluster-scoped, made by the admin
# The webhook's marks on a bound InferenceService: the cache's name (and namespace, for a namespaced one).
LOCAL_MODEL_LABEL = "internal.serving.kserve.io/localmodel"
LOCAL_MODEL_NAMESPACE_LABEL = "internal.serving.kserve.io/localmodel-namespace"
# Node statuses in a cache's status.nodeStatus (local_model_cache_status.go).
NODE_DOWNLOADED = "NodeDownloaded"
NODE_DOWNLOAD_ERROR = "NodeDownloadError"
# KServe's job namespace (localModel.jobNamespace in inferenceservice-config): cache downloads run there.
LOCAL_MODEL_JOB_NAMESPACE = "kserve-localmodel-jobs"

# ---- annotations ---------------------------------------------------------------

DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"  # Standard | Knative; always set explicitly
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"  # hpa | keda | external | none (Standard mode)
# The Secret KServe's storage initializer takes download credentials from
# (instead of the predictor ServiceAccount's); for hf:// it reads key HF_TOKEN.
STORAGE_SECRET_NAME = "serving.kserve.io/storageSecretName"
# Which of the cache's node groups the InferenceService reads from (default: the cache's first).
NODE_GROUP = "serving.kserve.io/nodegroup"
# Present: the webhook binds no cache (and unbinds one bound before) at this admission.
DISABLE_LOCAL_MODEL = "serving.kserve.io/disable-localmodel"
# Knative's time for a new revision to become ready before it is marked failed.
KNATIVE_PROGRESS_DEADLINE = "serving.knative.dev/progress-deadline"
# Knative's autoscaling settings (knative.dev/serving pkg/apis/autoscaling/register.go), set on the
# InferenceService: KServe copies its annotations onto the revisions of the predictor and the transformer (the
# gateway scales with the predictor in Knative mode), and reads initial-scale there itself: it drops a 0 the
# cluster's config-autoscaler does not allow (allow-zero-initial-scale), so the revision starts at Knative's
# default instead of being refused. min-scale and max-scale are KServe's own, from min/maxReplicas.
KNATIVE_INITIAL_SCALE = "autoscaling.knative.dev/initial-scale"  # an integer
KNATIVE_SCALE_DOWN_DELAY = "autoscaling.knative.dev/scale-down-delay"  # a Go duration, 0..1h, whole seconds
KNATIVE_WINDOW = "autoscaling.knative.dev/window"  # a Go duration, 6s..1h, whole seconds

# ---- the predictor and transformer -----------------------------------------------

# The format our vLLM pooling runtimes declare in supportedModelFormats.
MODEL_FORMAT = "vLLM"
# The protocol our runtimes declare. Rendered explicitly: for format vLLM,
# KServe's defaulting webhook would otherwise set v2, which our runtimes do not
# list, and KServe would refuse them (NoSupportingRuntime).
PROTOCOL_VERSION = "v1"
# Environment variables KServe's validating webhook refuses (pkg/validation/env_policy.go).
BLOCKED_ENV = ("PYTHONPATH",)
# KServe forces this container name on the predictor and the transformer.
CONTAINER_NAME = "kserve-container"
GPU_RESOURCE = "nvidia.com/gpu"
CLUSTER_DOMAIN = "svc.cluster.local"


def predictor_name(isvc: str) -> str:
    """The predictor's Service (both modes) and Deployment (Standard mode)."""
    return f"{isvc}-predictor"


# The name of the candidate's predictor in spec.canary[] (KServe v0.20, Standard mode): KServe
# makes a Deployment and a Service <isvc>-canary-predictor (62 characters at our 45-character limit).
CANARY_PREDICTOR = "canary"


def canary_predictor_name(isvc: str) -> str:
    """The canary predictor's Deployment and Service (KServe's constants.PredictorServiceName)."""
    return f"{isvc}-{CANARY_PREDICTOR}-predictor"


# KServe's condition on the InferenceService that sums up its canaries (Standard mode).
CANARY_PREDICTOR_READY = "CanaryPredictorReady"


def transformer_name(isvc: str) -> str:
    """The transformer's Service (both modes) and Deployment (Standard mode)."""
    return f"{isvc}-transformer"


# Labels KServe puts on the workloads it creates, in both modes.
ISVC_LABEL = "serving.kserve.io/inferenceservice"
COMPONENT_LABEL = "component"

# Standard mode names each component's host {component}-{namespace}.{domain}
# (KServe's default domainTemplate) and refuses a DNS label over 63 characters.
DNS_LABEL_MAX = 63


def cluster_local_url(service: str, namespace: str) -> str:
    return f"http://{service}.{namespace}.{CLUSTER_DOMAIN}"


# Values of COMPONENT_LABEL on KServe's pods (components/predictor.go, transformer.go).
PREDICTOR_COMPONENT = "predictor"
TRANSFORMER_COMPONENT = "transformer"

# ---- Knative mode's data path ----------------------------------------------------

# Requests reach a revision's pods through Knative's activator (knative-serving) or
# the local ingress gateway KServe's shipped config names
# (knative-local-gateway.istio-system), always on queue-proxy's ports, never on the
# container's; Knative's autoscaler scrapes queue-proxy's metrics port.
KNATIVE_SYSTEM_NAMESPACES = ("knative-serving", "istio-system")
KNATIVE_QUEUE_PROXY_PORTS = (8012, 8112)  # http, https (system-internal TLS)
KNATIVE_USER_METRICS_PORT = 9091  # queue-proxy's request metrics, for Prometheus

# ---- Knative's bounds -----------------------------------------------------------

# Knative Serving's default max-revision-timeout-seconds.
KNATIVE_MAX_TIMEOUT_SECONDS = 600
# Knative Serving's bounds on its autoscaling annotations (knative.dev/serving v0.48.1, the version KServe
# v0.20.0 builds against: pkg/apis/autoscaling/register.go WindowMin/WindowMax, annotation_validation.go):
# the stable window 6s..1h, scale-down-delay 0..1h, both in whole seconds.
KNATIVE_WINDOW_MIN = "6s"
KNATIVE_WINDOW_MAX = "1h"
KNATIVE_SCALE_DOWN_DELAY_MAX = "1h"
