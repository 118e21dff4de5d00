"""NetworkPolicies for trainers that cannot send a bearer token (spec.gateway.allowedClients).

OpenRLHF and verl call the gateway without an Authorization header, so what keeps
other pods out is the network. With allowedClients set, two policies select
KServe's pods by the labels KServe v0.20 puts on them in either mode
(``serving.kserve.io/inferenceservice: <isvc>`` and ``component:
transformer|predictor``, from components/transformer.go and predictor.go):

- the gateway's pods admit the listed peers on the serving port only;
- vLLM's pods admit only their own gateway's pods, so no one scores around the
  gateway (its chat template, its bounds, its tokens);
- both admit ``monitoringNamespaceSelector`` (Prometheus) on the metrics port.
- for scale to zero in Standard mode, the gateway's pods admit KEDA's operator
  (its namespace) and each other on the scaler port: KEDA asks them, and every
  replica asks its peers.

Knative mode: requests reach a revision's pods through Knative's activator and
the local ingress gateway, on queue-proxy's port, and the autoscaler scrapes
queue-proxy; their namespaces are admitted on every port. They forward any
caller that reaches them, so in Knative mode the peers keep out only callers
that go around Knative (straight to the pods or their private Service).

Not covered by any rule and not needed: the kubelet's probes (NetworkPolicy
implementations let a node reach its own pods) and egress (policyTypes is
Ingress only: the storage initializer and vLLM still download).
"""

from __future__ import annotations

import copy
from typing import Any

from ..api.keda import scales_through_keda
from ..api.kserve import (
    COMPONENT_LABEL,
    ISVC_LABEL,
    KNATIVE_QUEUE_PROXY_PORTS,
    KNATIVE_SYSTEM_NAMESPACES,
    KNATIVE_USER_METRICS_PORT,
    PREDICTOR_COMPONENT,
    TRANSFORMER_COMPONENT,
)
from ..api.naming import candidate_predictor_policy_name, gateway_policy_name, predictor_policy_name
from ..api.types import GatewaySpec, LabelSelector, NetworkPeer, ServingSpec
from .gateway_container import GATEWAY_PORT
from .metadata import child_metadata
from .owned import Owned
from .scaler import DEFAULT_KEDA_NAMESPACE, SCALER_PORT

API_VERSION = "networking.k8s.io/v1"
KIND = "NetworkPolicy"
# They come and go with gateway.allowedClients: every one of the owner's is listed at each reconcile.
OWNED = (Owned(API_VERSION, KIND),)
# The vLLM runtimes' serving and metrics port (runtimes/vllm-reward.yaml: --port=8080).
VLLM_PORT = 8080
# Every namespace carries this label with its own name (Kubernetes 1.21+).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
GATEWAY_POLICY_COMPONENT = "gateway-network-policy"
# The operator's pods, as the chart labels them (charts/reward-operator: selectorLabels and component).
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "reward-operator", "app.kubernetes.io/component": "operator"}
PREDICTOR_POLICY_COMPONENT = "predictor-network-policy"


def kserve_pods(isvc: str, component: str) -> LabelSelector:
    """KServe's pods of one component of InferenceService ``isvc``, in either mode."""
    return {"matchLabels": {ISVC_LABEL: isvc, COMPONENT_LABEL: component}}


def knative_system() -> NetworkPeer:
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": list(KNATIVE_SYSTEM_NAMESPACES)}
            ]
        }
    }


def _ports(numbers: tuple[int, ...]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": number} for number in numbers]


def _ingress(
    peers: list[NetworkPeer], container_port: int, mode: str, monitoring: LabelSelector | None
) -> list[dict[str, Any]]:
    knative = mode == "Knative"
    # In Knative mode queue-proxy fronts the container: requests arrive on its ports.
    serving_ports = KNATIVE_QUEUE_PROXY_PORTS if knative else (container_port,)
    rules: list[dict[str, Any]] = [{"from": peers, "ports": _ports(serving_ports)}]
    if monitoring is not None:
        # /metrics is on the container's port; queue-proxy adds its own in Knative mode.
        metrics_ports = (container_port, KNATIVE_USER_METRICS_PORT) if knative else (container_port,)
        rules.append({"from": [{"namespaceSelector": copy.deepcopy(monitoring)}], "ports": _ports(metrics_ports)})
    if knative:
        rules.append({"from": [knative_system()]})
    return rules


def _policy(
    owner: dict[str, Any], name: str, component: str, pods: LabelSelector, ingress: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": child_metadata(owner, name, component),
        "spec": {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def operator_peer(namespace: str) -> NetworkPeer:
    """The operator's pods (the chart's labels) in its namespace."""
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)},
    }


def network_policies(
    owner: dict[str, Any],
    isvc: str,
    gateway: GatewaySpec,
    serving: ServingSpec,
    operator_namespace: str | None = None,
    candidate_isvc: str | None = None,
    keda_namespace: str = DEFAULT_KEDA_NAMESPACE,
) -> list[dict[str, Any]]:
    """The gateway's and vLLM's policies when ``gateway.allowedClients`` is set, else none.

    ``operator_namespace``: during a rollout the operator reads the gateways' GET /canary
    (on the serving port), so its pods there are admitted to the gateway's. ``candidate_isvc``: Knative
    mode's candidate InferenceService, whose vLLM admits the gateway as the stable one does; ``keda_namespace``:
    where KEDA's operator runs, admitted to the gateway's scaler port for scale to zero in Standard mode."""
    clients = gateway.get("allowedClients")
    if not clients or not gateway["enabled"]:
        return []
    owner_name, mode = owner["metadata"]["name"], serving["mode"]
    monitoring = gateway.get("monitoringNamespaceSelector")
    gateway_pods = kserve_pods(isvc, TRANSFORMER_COMPONENT)
    gateway_ingress = _ingress(copy.deepcopy(clients), GATEWAY_PORT, mode, monitoring)
    if operator_namespace:
        gateway_ingress.append({"from": [operator_peer(operator_namespace)], "ports": _ports((GATEWAY_PORT,))})
    if scales_through_keda(serving):
        keda: NetworkPeer = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: keda_namespace}}}
        peers: NetworkPeer = {"podSelector": copy.deepcopy(gateway_pods)}
        gateway_ingress.append({"from": [keda, peers], "ports": _ports((SCALER_PORT,))})
    policies = [
        _policy(owner, gateway_policy_name(owner_name), GATEWAY_POLICY_COMPONENT, gateway_pods, gateway_ingress),
        _policy(
            owner,
            predictor_policy_name(owner_name),
            PREDICTOR_POLICY_COMPONENT,
            kserve_pods(isvc, PREDICTOR_COMPONENT),
            _ingress([{"podSelector": copy.deepcopy(gateway_pods)}], VLLM_PORT, mode, monitoring),
        ),
    ]
    if candidate_isvc:
        policies.append(
            _policy(
                owner,
                candidate_predictor_policy_name(owner_name),
                PREDICTOR_POLICY_COMPONENT,
                kserve_pods(candidate_isvc, PREDICTOR_COMPONENT),
                _ingress([{"podSelector": copy.deepcopy(gateway_pods)}], VLLM_PORT, mode, monitoring),
            )
        )
    return policies
