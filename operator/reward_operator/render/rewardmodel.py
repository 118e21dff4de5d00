"""RewardModel -> its children: with the gateway, a ConfigMap with the RewardModel's generation
(render/model_identity.py); during a rollout (spec.canary) a ConfigMap with the
candidate's share, a ConfigMap with its chat template (when it has
one), NetworkPolicies for the gateway's allowed clients (when it names them), the
InferenceService (vLLM pooling predictor, reward gateway transformer) and, where
KEDA scales a Standard-mode predictor (to zero, or on a concurrency target), the
gateway's scaler Service and KEDA's ScaledObject."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..api.keda import scales_through_keda
from ..api.kserve import DISABLE_LOCAL_MODEL, NODE_GROUP
from ..api.naming import candidate_isvc_name
from ..api.types import RewardModel
from . import cache as cache_render
from . import canary as canary_render
from . import chat_template, model_identity, networkpolicy, scaler
from .canary import Candidate
from .gateway import transformer
from .gateway_wait import gateway_wait
from .inferenceservice import annotations, inference_service, storage_secret
from .metadata import child_metadata
from .owned import Rendered
from .predictor import model_env, predictor
from .runtime import runtime
from .served_model import served_model
from .vllm_args import runner

COMPONENT = "reward-model"


def served_name(reward_model: RewardModel) -> str:
    return reward_model["spec"]["model"].get("servedName") or reward_model["metadata"]["name"]


def candidate_served_name(reward_model: RewardModel) -> str:
    return reward_model["spec"].get("canary", {}).get("model", {}).get("servedName") or served_name(reward_model)


def reward_model_children(
    reward_model: RewardModel,
    candidate: Candidate | None,
    gateway_image: str,
    canary_percent: int = 0,
    operator_namespace: str | None = None,
    keda_namespace: str = scaler.DEFAULT_KEDA_NAMESPACE,
    cache_bound: bool = True,
    pull_secrets: Sequence[str] = (),
) -> Rendered:
    """Every child of a (defaulted) RewardModel, in apply order, and the sets of its children that come
    and go with the spec (render/owned.py).

    ``candidate``: :func:`candidate` of this RewardModel (rendered once per reconcile); ``canary_percent``:
    the candidate's share the gateways are to run (the rollout's current step, status.canary.percent), in
    the rollout's ConfigMap; ``operator_namespace``: where the operator runs, admitted to the gateway's pods
    for its rollout figures when NetworkPolicies guard them; ``keda_namespace``: where KEDA's operator runs,
    admitted to the gateway's scaler port likewise; ``cache_bound``: with spec.cache, whether the
    InferenceService reads from the cache yet (:mod:`reward_operator.policy.cache`); ``pull_secrets``: the
    Secrets its InferenceServices' pods pull their images with (render/pull_secrets.py)."""
    children = []
    canary = reward_model["spec"].get("canary")
    if canary:
        # first: the gateway's pods mount it, so a new pod never waits on a missing ConfigMap
        share = canary_percent if canary["mode"] == "split" else 0  # a shadow answers with the stable model only
        children.append(canary_render.rollout_config_map(reward_model, share))
    if "cache" in reward_model["spec"]:
        # before the InferenceService: KServe binds a cache to it only when it is admitted
        children.append(cache_render.local_model_cache(reward_model))
    if reward_model["spec"]["gateway"]["enabled"]:
        children.append(model_identity.identity_config_map(reward_model))  # mounted by the gateway: applied first
    if template := reward_model["spec"]["model"].get("chatTemplate"):
        children.append(chat_template.config_map(reward_model, template))  # mounted: applied first
    if canary and (candidate_template := canary_render.template_config_map(reward_model, canary)):
        children.append(candidate_template)
    # before the InferenceService, so its pods never run unprotected
    children += networkpolicy.network_policies(
        reward_model,
        reward_model["metadata"]["name"],
        reward_model["spec"]["gateway"],
        reward_model["spec"]["serving"],
        operator_namespace if canary else None,
        candidate_isvc_name(reward_model["metadata"]["name"])
        if canary and reward_model["spec"]["serving"]["mode"] == "Knative"
        else None,
        keda_namespace,
    )
    keda = scales_through_keda(reward_model["spec"]["serving"])
    name = reward_model["metadata"]["name"]
    if keda:
        children.append(scaler.scaler_service(reward_model, name))  # the gateway's peers resolve it at start
    children.append(reward_model_inference_service(reward_model, candidate, gateway_image, cache_bound, pull_secrets))
    if keda:
        children.append(scaler.scaled_object(reward_model, name, reward_model["spec"]["serving"]))
    if canary and reward_model["spec"]["serving"]["mode"] == "Knative":
        children.append(candidate_inference_service(reward_model, pull_secrets))
    owned = (
        *networkpolicy.OWNED,
        *scaler.OWNED,
        *canary_render.owned(reward_model),
        *model_identity.owned(reward_model),
    )
    return Rendered(children, owned)


def model_runtime(reward_model: RewardModel) -> str:
    """The ClusterServingRuntime of the stable model: spec.runtime, else by its kind's runner and resources.gpus."""
    spec = reward_model["spec"]
    return runtime(spec.get("runtime"), spec["resources"]["gpus"], runner(spec["model"]["kind"]))


def candidate_runtime(reward_model: RewardModel) -> str | None:
    """The candidate's runtime (spec.runtime, else by its own GPUs), or None without spec.canary."""
    spec = reward_model["spec"]
    if "canary" not in spec:
        return None
    candidate = canary_render.candidate_resources(spec["resources"], spec["canary"])
    return runtime(spec.get("runtime"), candidate["gpus"], runner(spec["model"]["kind"]))


def candidate_inference_service(reward_model: RewardModel, pull_secrets: Sequence[str] = ()) -> dict[str, Any]:
    """Knative mode's candidate: a second InferenceService, predictor only, that the gateway of the first
    calls (render/canary.py says why not canaryTrafficPercent)."""
    name, spec = reward_model["metadata"]["name"], reward_model["spec"]
    rendered_predictor = canary_render.candidate_predictor(
        name, spec, candidate_served_name(reward_model), standalone=True
    )
    merged = canary_render.candidate_model(spec["model"], spec["canary"])
    isvc_annotations = {
        **annotations(spec["serving"]),
        **storage_secret(merged["uri"], spec.get("credentials", {})),
    }
    metadata = child_metadata(
        reward_model, candidate_isvc_name(name), canary_render.CANDIDATE_COMPONENT, isvc_annotations
    )
    return inference_service(metadata, rendered_predictor, pull_secrets=pull_secrets)


def candidate(reward_model: RewardModel) -> Candidate | None:
    """spec.canary's candidate (its ``spec.canary[]`` entry, who it is and which rollout), or None without one."""
    if "canary" not in reward_model["spec"]:
        return None
    return canary_render.candidate(
        reward_model["metadata"]["name"], reward_model["spec"], candidate_served_name(reward_model)
    )


def reward_model_inference_service(
    reward_model: RewardModel,
    candidate: Candidate | None,
    gateway_image: str,
    cache_bound: bool = True,
    pull_secrets: Sequence[str] = (),
) -> dict[str, Any]:
    """The InferenceService for a (defaulted) RewardModel; ``gateway_image`` runs its transformer;
    ``candidate``: :func:`candidate` of it."""
    name, spec = reward_model["metadata"]["name"], reward_model["spec"]
    credentials = spec.get("credentials", {})
    env = model_env(spec.get("env", []), credentials)
    model_spec = served_model(
        spec["model"],  # type: ignore[arg-type]
        spec["resources"],  # type: ignore[arg-type]
        spec.get("runtime"),
        served_name(reward_model),
        env,
    )
    templated = "chatTemplate" in spec["model"]
    rendered_predictor = predictor(
        model_spec,
        spec["serving"],
        credentials,
        spec.get("nodeSelector", {}),
        spec.get("tolerations", []),
        [chat_template.volume(name)] if templated else None,
        held_for=gateway_wait(spec),
    )
    canary = spec.get("canary")
    rendered_transformer = None
    if spec["gateway"]["enabled"]:
        rollout = None
        if canary is not None:
            assert candidate is not None
            rollout = canary_render.gateway_rollout(
                name,
                spec["serving"]["mode"],
                reward_model["metadata"].get("namespace", "default"),
                canary,
                served_name(reward_model),
                candidate_served_name(reward_model),
                candidate.identity.candidate,
                spec["gateway"]["chatTemplateMode"] == "gateway",
            )
        rendered_transformer = transformer(
            name,
            reward_model["metadata"].get("namespace", "default"),
            spec["model"],
            spec["gateway"],
            spec["serving"],
            served_name(reward_model),
            gateway_image,
            rollout,
            spec.get("judge"),
        )
    isvc_annotations = {**annotations(spec["serving"]), **storage_secret(spec["model"]["uri"], credentials)}
    if cache := spec.get("cache"):
        # KServe reads the cache of this node group (its PV's node affinity places the pods)
        isvc_annotations[NODE_GROUP] = cache["nodeGroups"][0]
        if not cache_bound:
            isvc_annotations[DISABLE_LOCAL_MODEL] = "true"  # served from its own download meanwhile
    metadata = child_metadata(reward_model, name, COMPONENT, isvc_annotations)
    isvc = inference_service(metadata, rendered_predictor, rendered_transformer, pull_secrets)
    if canary is not None and spec["serving"]["mode"] == "Standard":
        assert candidate is not None
        isvc["spec"]["canary"] = [candidate.entry]
    return isvc
