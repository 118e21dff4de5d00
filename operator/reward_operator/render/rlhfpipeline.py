"""RLHFPipeline -> its children: an InferenceService per served role (actor and reference on the
vLLM generate runtime, the critic on the pooling runtime; their CPU builds with resources.gpus: 0),
each with its role's gateway as the transformer, then the InferenceGraph over them and the
RewardModels it names (render/inferencegraph.py).

The RewardModels are not children: they are the user's, named by reference, and live on their own.
Built from RewardModel's builders (render/predictor.py, render/inferenceservice.py), so a role is
rendered as a RewardModel's predictor is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..api.kserve import INFERENCE_SERVICE_API_VERSION, INFERENCE_SERVICE_KIND
from ..api.naming import ACTOR, CRITIC, REFERENCE, role_isvc_name
from ..api.types import RLHFPipeline, RoleSpec
from . import inferencegraph
from .inferenceservice import annotations, inference_service, storage_secret
from .metadata import child_metadata
from .owned import Owned, Rendered
from .pipeline_gateway import role_transformer
from .predictor import model, model_env, predictor, resources
from .runtime import GENERATE, POOLING, engine_args, runtime
from .vllm_args import generate_args, vllm_args

GRAPH_COMPONENT = "inference-graph"
# The critic's head: one value per token, raw, from vLLM's /pooling (a token reward model's rendering).
CRITIC_MODEL_KIND = "token"
# Fields of the reference that are the actor's when unset (its serving and gateway are its own).
_INHERITED = ("runtime", "nodeSelector", "tolerations", "env", "credentials")
# The roles' InferenceServices come and go with the spec (the critic's with spec.critic). The graph is not
# among them: held while a RewardModel it calls is missing, it is left as it was.
OWNED = (Owned(INFERENCE_SERVICE_API_VERSION, INFERENCE_SERVICE_KIND),)


def reference_role(pipeline: RLHFPipeline) -> RoleSpec:
    """The reference as served: its own fields where set, else the actor's (the actor's base model by
    default), with a served name of its own."""
    actor, reference = pipeline["spec"]["actor"], pipeline["spec"].get("reference", {})
    actor_model = {k: v for k, v in actor["model"].items() if k != "servedName"}
    merged: dict[str, Any] = {
        "model": {**actor_model, **reference.get("model", {})},
        "resources": {**actor.get("resources", {}), **reference.get("resources", {})},
        "serving": reference.get("serving") or {"minReplicas": 1, "maxReplicas": 1},
        "gateway": reference.get("gateway", {}),
    }
    for field in _INHERITED:
        if field in reference or field in actor:
            merged[field] = reference.get(field, actor.get(field))  # type: ignore[misc]
    return merged  # type: ignore[return-value]


def role_resources(spec: RoleSpec) -> dict[str, Any]:
    """A role's compute, its default filled in (one GPU)."""
    return {"gpus": 1, **spec.get("resources", {})}


def role_runtime(role: str, spec: RoleSpec) -> str:
    """The runtime a role (as served: the reference merged with the actor's fields) runs on: the one it
    names, else the pooling runtime for the critic and the generate runtime for the others, on GPUs or,
    with resources.gpus: 0, on the CPU."""
    return runtime(spec.get("runtime"), role_resources(spec)["gpus"], POOLING if role == CRITIC else GENERATE)


def served_name(pipeline: RLHFPipeline, role: str, spec: RoleSpec) -> str:
    return spec["model"].get("servedName") or role_isvc_name(pipeline["metadata"]["name"], role)


def role_inference_service(
    pipeline: RLHFPipeline,
    role: str,
    spec: RoleSpec,
    gateway_image: str,
    pull_secrets: Sequence[str] = (),
    **gateway_extra: Any,
) -> dict[str, Any]:
    """The InferenceService of one role: Standard mode, its gateway in front; ``pull_secrets``: the Secrets
    its pods pull their images with."""
    name = role_isvc_name(pipeline["metadata"]["name"], role)
    namespace = pipeline["metadata"].get("namespace", "default")
    served = served_name(pipeline, role, spec)
    credentials = spec.get("credentials", {})
    compute = role_resources(spec)
    env = model_env(spec.get("env", []), credentials)
    engine = engine_args(dict(spec["model"]), compute, env)
    if role == CRITIC:
        args = vllm_args({**spec["model"], "kind": CRITIC_MODEL_KIND}, served, engine=engine)
    else:
        args = generate_args(dict(spec["model"]), served, engine)
    model_spec = model(
        spec["model"]["uri"],
        role_runtime(role, spec),
        args,
        env,
        resources(compute),  # type: ignore[arg-type]
    )
    serving = {"mode": "Standard", **spec["serving"]}
    rendered_predictor = predictor(
        model_spec,
        serving,  # type: ignore[arg-type]
        credentials,
        spec.get("nodeSelector", {}),
        spec.get("tolerations", []),
    )
    rendered_transformer = role_transformer(
        name, namespace, role, served, spec.get("gateway", {}), spec["serving"], gateway_image, **gateway_extra
    )
    isvc_annotations = {**annotations(serving), **storage_secret(spec["model"]["uri"], credentials)}  # type: ignore[arg-type]
    metadata = child_metadata(pipeline, name, role, isvc_annotations)
    return inference_service(metadata, rendered_predictor, rendered_transformer, pull_secrets)


def pipeline_children(
    pipeline: RLHFPipeline, gateway_image: str, with_graph: bool = True, pull_secrets: Sequence[str] = ()
) -> Rendered:
    """Every child of a (defaulted) RLHFPipeline, in apply order: the roles' InferenceServices, then the
    graph over them (``with_graph`` False: without it, while a RewardModel it would call is missing); and
    the sets of them it owns."""
    spec = pipeline["spec"]
    name = pipeline["metadata"]["name"]
    namespace = pipeline["metadata"].get("namespace", "default")
    best_of_n = spec["flows"]["bestOfN"]["candidates"] if "bestOfN" in spec["flows"] else None
    children = [
        # the actor's gateway combines the parts and picks the best of n, so it holds the weights
        role_inference_service(
            pipeline,
            ACTOR,
            spec["actor"],
            gateway_image,
            pull_secrets,
            rewards=spec["rewards"],
            best_of_n=best_of_n,
        ),
        role_inference_service(pipeline, REFERENCE, reference_role(pipeline), gateway_image, pull_secrets),
    ]
    if "critic" in spec:
        children.append(role_inference_service(pipeline, CRITIC, spec["critic"], gateway_image, pull_secrets))
    if with_graph:
        graph_nodes = inferencegraph.nodes(
            namespace,
            role_isvc_name(name, ACTOR),
            role_isvc_name(name, REFERENCE),
            role_isvc_name(name, CRITIC) if "critic" in spec else None,
            spec["rewards"],
            spec["flows"],
        )
        metadata = child_metadata(pipeline, name, GRAPH_COMPONENT, dict(inferencegraph.ANNOTATIONS))
        children.append(inferencegraph.inference_graph(metadata, graph_nodes, spec["graph"]))
    return Rendered(children, OWNED)
