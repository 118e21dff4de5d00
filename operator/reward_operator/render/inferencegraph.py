"""An RLHFPipeline's InferenceGraph: KServe's router (cmd/router, v0.20) over the roles' gateways.

What the router can do decides the shape (../shared notes on v0.20, section InferenceGraph):
it POSTs JSON to each step's ``serviceUrl`` as given; a ``Sequence`` step gets the
previous step's answer only with ``data: "$response"``, otherwise the graph's
original request; an ``Ensemble`` runs its steps in parallel and answers
``{"<step name>": <answer>}``, every answer a JSON object; a ``Switch`` takes the
first step whose gjson ``condition`` exists in the request; a ``Hard`` step that
fails ends its node with that step's status and body. vLLM's generate and pooling
servers answer no v1 predict path (``serviceName`` resolves to one), and none of
their shapes is another's, so every step is a ``serviceUrl`` on a gateway route
under ``/v1/pipeline/`` (render/pipeline_gateway.py): the actor's, the
reference's and the critic's gateways (their InferenceServices' transformers) and
each RewardModel's own gateway.

One graph, one URL; the request's fields pick the flow (``root``, a Switch, in this
order, with only the flows in spec.flows):

======================  ==========  =====================================================
flow                    condition   request
======================  ==========  =====================================================
best-of-n               best_of_n   {"best_of_n": true, "prompts": [...]}
score                   responses   {"prompts": [...], "responses": [...]}
generate-and-score      prompts     {"prompts": [...]}
======================  ==========  =====================================================

A request matching none is the router's 404 ("None of the routes matched").

Nodes and the routes each step calls (A = the actor's gateway
``http://<name>-actor-transformer.<ns>.svc.cluster.local``, R = the reference's,
C = the critic's, M = a RewardModel's ``http://<rm>-transformer.<ns>...``):

- ``score`` (Sequence): ``parts`` -> node ``score-parts``; then ``combine`` -> A
  ``/v1/pipeline/combine`` with ``$response``: the weighted combined reward
  (spec.rewards' weights, optional running normalisation, kept in the actor's gateway)
  and every part, per item, in the request's order.
- ``score-parts`` (Ensemble): ``input`` -> A ``/v1/pipeline/input`` (the request,
  validated, so ``combine`` sees the prompts and responses); ``reward-<rm>`` -> M
  ``/v1/pipeline/reward`` for each RewardModel; ``critic`` -> C ``/v1/pipeline/values``
  (vLLM's /pooling, one value per response token); ``reference`` -> R
  ``/v1/pipeline/logprobs`` (vLLM's completions API with prompt log-probabilities of
  the response tokens).
- ``generate-and-score`` (Sequence): ``generate`` -> A ``/v1/pipeline/generate``
  (vLLM's completions API; answers a score request, prompts and responses); then
  ``score`` -> node ``score`` with ``$response``.
- ``best-of-n`` (Sequence): ``candidates`` -> A ``/v1/pipeline/candidates`` (n
  completions per prompt, answered as a score request whose items carry their
  prompt's group); ``parts`` -> node ``best-of-n-parts`` with ``$response``;
  ``select`` -> A ``/v1/pipeline/select`` with ``$response``: per prompt the best
  candidate by the combined reward, with every candidate's scores.
- ``best-of-n-parts`` (Ensemble): ``input`` and the ``reward-<rm>`` steps (the
  reward models score each prompt's candidates as one group; the critic and the
  reference are not needed to choose).

Every step is ``Hard``: a failing reward model (or role) ends the flow with its
status and body, as the router returns them, never a combined reward with a part
missing.

The router's limits: it reads, writes and waits on each step for at most 60 s unless
``routerTimeouts`` says otherwise (a batch of generations takes minutes).
spec.graph.timeoutSeconds is each step's wait (``serviceClient``) and the request's read
(``serverRead``). The write timeout (``serverWrite``) is Go's ``http.Server.WriteTimeout``, counted
from the request's arrival: a handler that outlasts it has its answer dropped, the connection
closed with no answer at all. So it outlasts the flow's steps one after another (a Sequence's add
up, an Ensemble's run side by side: three for generate-and-score and best-of-n, two for score)
plus a margin: a flow whose steps each finish in time is answered, and a step that times out
ends with the router's own 500, which says which step, never a dropped connection.

It forwards a request's headers to the steps only when they match the cluster-wide
``router.headers.propagate`` of KServe's ``inferenceservice-config`` (its env ``PROPAGATE_HEADERS``), which leaves out
``Authorization`` by default: the roles' gateways take no bearer token, and a
RewardModel whose gateway does (gateway.authSecretRef) answers the graph 401 unless
the cluster admin adds ``Authorization`` there (a cluster setting: the operator
renders no per-graph header list, because KServe v0.20 has none).
"""

from __future__ import annotations

from typing import Any

from ..api.kserve import (
    DEPLOYMENT_MODE,
    GRAPH_PREVIOUS_RESPONSE,
    GRAPH_ROOT_NODE,
    INFERENCE_GRAPH_API_VERSION,
    INFERENCE_GRAPH_KIND,
    cluster_local_url,
    transformer_name,
)
from ..api.types import FlowsSpec, GraphSpec, RewardRef
from .pipeline_gateway import reward_step

PATH_PREFIX = "/v1/pipeline"
# (flow field in spec.flows, node and step name, the request field that picks it), in the Switch's order:
# a best-of-n request carries prompts too, and a score request prompts and responses.
FLOWS = (
    ("bestOfN", "best-of-n", "best_of_n"),
    ("score", "score", "responses"),
    ("generateAndScore", "generate-and-score", "prompts"),
)


def _step(name: str, url: str, previous: bool = False, target: str = "serviceUrl") -> dict[str, Any]:
    """A step calling ``url`` (``target`` nodeName: another node of the graph), sent the previous step's
    answer when ``previous``, else the graph's request."""
    step: dict[str, Any] = {"name": name, target: url}
    if previous:
        step["data"] = GRAPH_PREVIOUS_RESPONSE
    step["dependency"] = "Hard"
    return step


def _node_step(name: str, node: str, previous: bool = False) -> dict[str, Any]:
    return _step(name, node, previous, target="nodeName")


def gateway_url(isvc: str, namespace: str, route: str) -> str:
    return f"{cluster_local_url(transformer_name(isvc), namespace)}{PATH_PREFIX}/{route}"


def nodes(
    namespace: str,
    actor_isvc: str,
    reference_isvc: str,
    critic_isvc: str | None,
    rewards: list[RewardRef],
    flows: FlowsSpec,
) -> dict[str, Any]:
    """The graph's nodes for the flows in ``flows``."""

    def actor(route: str) -> str:
        return gateway_url(actor_isvc, namespace, route)

    def reward_steps() -> list[dict[str, Any]]:  # one list per node: a step shared would be one object twice
        return [_step(reward_step(r["name"]), gateway_url(r["name"], namespace, "reward")) for r in rewards]

    rendered: dict[str, Any] = {
        GRAPH_ROOT_NODE: {
            "routerType": "Switch",
            "steps": [
                {"name": node, "nodeName": node, "condition": field} for flow, node, field in FLOWS if flow in flows
            ],
        }
    }
    if "score" in flows or "generateAndScore" in flows:
        parts = [_step("input", actor("input")), *reward_steps()]
        if critic_isvc is not None:
            parts.append(_step("critic", gateway_url(critic_isvc, namespace, "values")))
        parts.append(_step("reference", gateway_url(reference_isvc, namespace, "logprobs")))
        rendered["score"] = {
            "routerType": "Sequence",
            "steps": [_node_step("parts", "score-parts"), _step("combine", actor("combine"), previous=True)],
        }
        rendered["score-parts"] = {"routerType": "Ensemble", "steps": parts}
    if "generateAndScore" in flows:
        rendered["generate-and-score"] = {
            "routerType": "Sequence",
            "steps": [_step("generate", actor("generate")), _node_step("score", "score", previous=True)],
        }
    if "bestOfN" in flows:
        rendered["best-of-n"] = {
            "routerType": "Sequence",
            "steps": [
                _step("candidates", actor("candidates")),
                _node_step("parts", "best-of-n-parts", previous=True),
                _step("select", actor("select"), previous=True),
            ],
        }
        rendered["best-of-n-parts"] = {
            "routerType": "Ensemble",
            "steps": [_step("input", actor("input")), *reward_steps()],
        }
    return rendered


# Standard mode, explicitly: KServe's configmap default (Serverless) would need Knative.
ANNOTATIONS = {DEPLOYMENT_MODE: "Standard"}
# What the router's write timeout adds to its steps' waits: its own work between them (parsing and joining
# the answers) and writing its answer.
ROUTER_MARGIN_SECONDS = 30


def steps_in_turn(graph_nodes: dict[str, Any], node: str = GRAPH_ROOT_NODE) -> int:
    """The most steps a request through ``node`` waits on one after another: a Sequence's steps add up, an
    Ensemble's run side by side, a Switch takes one of its steps."""
    steps = graph_nodes[node]["steps"]
    counts = [steps_in_turn(graph_nodes, step["nodeName"]) if "nodeName" in step else 1 for step in steps]
    return sum(counts) if graph_nodes[node]["routerType"] == "Sequence" else max(counts)


def router_timeouts(graph_nodes: dict[str, Any], step_seconds: int) -> dict[str, int]:
    """KServe's routerTimeouts: each step waited on ``step_seconds``, the answer written after the longest
    flow's steps one after another (see the module's docstring)."""
    write = steps_in_turn(graph_nodes) * step_seconds + ROUTER_MARGIN_SECONDS
    return {"serverRead": step_seconds, "serverWrite": write, "serviceClient": step_seconds}


def inference_graph(metadata: dict[str, Any], graph_nodes: dict[str, Any], graph: GraphSpec) -> dict[str, Any]:
    """The InferenceGraph; ``metadata`` carries :data:`ANNOTATIONS`."""
    return {
        "apiVersion": INFERENCE_GRAPH_API_VERSION,
        "kind": INFERENCE_GRAPH_KIND,
        "metadata": metadata,
        "spec": {
            "nodes": graph_nodes,
            "routerTimeouts": router_timeouts(graph_nodes, graph["timeoutSeconds"]),
            "minReplicas": graph["minReplicas"],
            "maxReplicas": graph["maxReplicas"],
        },
    }


def graph_url(name: str, namespace: str) -> str:
    """The graph's in-cluster address: KServe's status.url in Standard mode is an external host
    (<name>-<namespace>.example.com by default), which clients in the cluster seldom resolve."""
    return cluster_local_url(name, namespace)
