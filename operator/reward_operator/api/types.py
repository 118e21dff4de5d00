"""Typed views of the custom resources, as the API server hands them over (defaults filled in).

They are plain dicts at run time; the types say which keys exist and what they
hold, so render and policy code reads ``spec["serving"]["mode"]`` with a checker
and a reader knowing it is there. Keys marked ``NotRequired`` are optional in
the schema and have no default. A unit test checks every view's keys against
the schema (api/schema), so the two cannot drift apart. (No `from __future__
import annotations` here: TypedDict must see NotRequired at class creation.)
"""

from typing import Any, NotRequired, TypedDict


class KeyRef(TypedDict):
    name: str
    key: str


class EnvSource(TypedDict, total=False):
    secretKeyRef: KeyRef
    configMapKeyRef: KeyRef


class EnvVar(TypedDict):
    name: str
    value: NotRequired[str]
    valueFrom: NotRequired[EnvSource]


class Toleration(TypedDict, total=False):
    key: str
    operator: str
    value: str
    effect: str
    tolerationSeconds: int


class ServedModelFields(TypedDict, total=False):
    """The optional fields every served model has: a reward model's, a candidate's, a pipeline role's."""

    servedName: str
    maxModelLen: int
    dtype: str
    quantization: str
    extraArgs: list[str]


class RewardModelFields(ServedModelFields, total=False):
    """The optional fields of a reward model, the stable one's and the candidate's."""

    chatTemplate: str
    stepTagId: int
    returnedTokenIds: list[int]
    rewardTokenId: int
    maxNumBatchedTokens: int


class ModelSpec(RewardModelFields):
    uri: str
    kind: str  # sequence | token | process | judge (defaulted)
    tensorParallelSize: int  # defaulted


class JudgeLabel(TypedDict):
    token: str
    value: float


class JudgeChoice(TypedDict):
    text: str
    value: float


class StructuredVerdict(TypedDict, total=False):
    jsonSchema: dict[str, Any]
    field: str
    choices: list[JudgeChoice]
    minimum: float
    maximum: float
    maxTokens: int  # defaulted


class JudgeSpec(TypedDict):
    """spec.judge (and canary.judge): handed to the reward gateway as it is (REWARD_GATEWAY_JUDGE)."""

    prompt: str
    system: NotRequired[str]
    labels: NotRequired[list[JudgeLabel]]
    structured: NotRequired[StructuredVerdict]


class ResourcesSpec(TypedDict):
    gpus: int  # defaulted
    cpu: NotRequired[int | str]
    memory: NotRequired[int | str]


class CredentialsSpec(TypedDict, total=False):
    serviceAccountName: str
    huggingFaceToken: KeyRef


class ServingSpec(TypedDict):
    mode: str  # Standard | Knative (defaulted)
    minReplicas: int  # defaulted
    maxReplicas: int  # defaulted
    targetConcurrency: NotRequired[int]
    timeoutSeconds: NotRequired[int]
    scaleDownDelay: NotRequired[str]
    initialScale: NotRequired[int]
    scalingWindow: NotRequired[str]


class GatewayResources(TypedDict, total=False):
    cpu: int | str
    memory: int | str


class LabelSelectorRequirement(TypedDict):
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: NotRequired[list[str]]


class LabelSelector(TypedDict, total=False):
    matchLabels: dict[str, str]
    matchExpressions: list[LabelSelectorRequirement]


class NetworkPeer(TypedDict, total=False):
    namespaceSelector: LabelSelector
    podSelector: LabelSelector


class ClientWeight(TypedDict):
    name: str
    weight: float


class SchedulingSpec(TypedDict, total=False):
    coalesce: bool
    maxWaitMilliseconds: int
    maxItemsPerCall: int
    maxCallsInFlight: int
    maxCallMilliseconds: int
    fairShare: bool
    clients: list[ClientWeight]
    defaultClientWeight: float


class GatewaySpec(TypedDict):
    enabled: bool  # defaulted
    chatTemplateMode: str  # upstream | gateway (defaulted)
    bosToken: NotRequired[str]
    eosToken: NotRequired[str]
    stepTag: NotRequired[str]
    stepAggregate: NotRequired[str]
    maxConcurrency: NotRequired[int]
    requestTimeoutSeconds: NotRequired[int]
    scaleFromZeroTimeoutSeconds: NotRequired[int]
    maxHeldRequests: NotRequired[int]
    maxItems: NotRequired[int]
    truncatePromptTokens: NotRequired[int]
    authSecretRef: NotRequired[KeyRef]
    resources: NotRequired[GatewayResources]
    allowedClients: NotRequired[list[NetworkPeer]]
    monitoringNamespaceSelector: NotRequired[LabelSelector]
    scheduling: NotRequired[SchedulingSpec]


class CandidateModelSpec(RewardModelFields):
    uri: str
    tensorParallelSize: NotRequired[int]


class ModelResources(GatewayResources, total=False):
    """A model's compute where every field is optional (spec.canary's over the stable model's; a role's)."""

    gpus: int


class CanarySpec(TypedDict):
    model: CandidateModelSpec
    judge: NotRequired[JudgeSpec]
    replicas: int  # defaulted
    mode: str  # shadow | split (defaulted)
    interval: str  # a Go duration (defaulted)
    sticky: str  # group | client (defaulted)
    minAgreement: float  # defaulted
    maxErrorRatio: float  # defaulted
    minPairs: int  # defaulted
    minRequests: int  # defaulted
    attempt: int  # defaulted
    resources: NotRequired[ModelResources]
    percent: NotRequired[int]
    steps: NotRequired[list[int]]
    clientHeader: NotRequired[str]


class CacheSpec(TypedDict):
    scope: str  # Namespace | Cluster (defaulted)
    modelSize: int | str
    nodeGroups: list[str]
    serviceAccountName: NotRequired[str]


class RewardModelSpec(TypedDict):
    model: ModelSpec
    judge: NotRequired[JudgeSpec]
    runtime: NotRequired[str]  # unset: render/runtime.py picks by resources.gpus
    resources: ResourcesSpec
    serving: ServingSpec
    gateway: GatewaySpec
    nodeSelector: NotRequired[dict[str, str]]
    tolerations: NotRequired[list[Toleration]]
    env: NotRequired[list[EnvVar]]
    credentials: NotRequired[CredentialsSpec]
    canary: NotRequired[CanarySpec]
    cache: NotRequired[CacheSpec]


class Condition(TypedDict):
    type: str
    status: str
    reason: NotRequired[str]
    message: NotRequired[str]
    lastTransitionTime: str
    observedGeneration: NotRequired[int]


class CanaryStatus(TypedDict, total=False):
    candidate: str
    revision: str
    mode: str
    phase: str
    step: int
    percent: int
    stepStartedAt: str
    agreement: float
    kendallTauB: float
    pairs: float
    errorRatio: float
    requests: float
    scoreShift: float
    gateways: int
    message: str


class ModelCacheStatus(TypedDict, total=False):
    kind: str
    name: str
    namespace: str


class ObjectStatus(TypedDict, total=False):
    """What the status of either kind opens with: status_schema's two fields (api/schema/common.py), and the URL."""

    observedGeneration: int
    conditions: list[Condition]
    url: str


class RewardModelStatus(ObjectStatus, total=False):
    externalURL: str
    inferenceService: str
    replicas: int
    canary: CanaryStatus
    modelCache: ModelCacheStatus


class RewardModel(TypedDict):
    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    spec: RewardModelSpec
    status: NotRequired[RewardModelStatus]


# ---- RLHFPipeline ---------------------------------------------------------------------


class GenerateModelSpec(ServedModelFields):
    """A role's model: RewardModel's model fields that apply to a generating (or value) model."""

    uri: str
    tensorParallelSize: int  # defaulted


class ReferenceModelSpec(ServedModelFields, total=False):
    """The reference's model: every unset field is the actor's."""

    uri: str
    tensorParallelSize: int


class RoleServing(TypedDict):
    minReplicas: int  # defaulted
    maxReplicas: int  # defaulted
    timeoutSeconds: NotRequired[int]


class RoleGateway(TypedDict, total=False):
    maxConcurrency: int
    requestTimeoutSeconds: int
    resources: GatewayResources


class RoleSpec(TypedDict):
    model: GenerateModelSpec
    serving: RoleServing  # defaulted
    runtime: NotRequired[str]
    resources: NotRequired[ModelResources]
    nodeSelector: NotRequired[dict[str, str]]
    tolerations: NotRequired[list[Toleration]]
    env: NotRequired[list[EnvVar]]
    credentials: NotRequired[CredentialsSpec]
    gateway: NotRequired[RoleGateway]


class ReferenceSpec(TypedDict, total=False):
    model: ReferenceModelSpec
    serving: RoleServing
    runtime: str
    resources: ModelResources
    nodeSelector: dict[str, str]
    tolerations: list[Toleration]
    env: list[EnvVar]
    credentials: CredentialsSpec
    gateway: RoleGateway


class RewardRef(TypedDict):
    name: str
    weight: float  # defaulted
    normalise: str  # none | running (defaulted)


class BestOfNFlow(TypedDict):
    candidates: int  # defaulted


class EmptyFlow(TypedDict):
    pass


class FlowsSpec(TypedDict, total=False):
    score: EmptyFlow
    generateAndScore: EmptyFlow
    bestOfN: BestOfNFlow


class GraphSpec(TypedDict):
    timeoutSeconds: int  # defaulted
    minReplicas: int  # defaulted
    maxReplicas: int  # defaulted


class RLHFPipelineSpec(TypedDict):
    actor: RoleSpec
    rewards: list[RewardRef]
    flows: FlowsSpec  # defaulted
    graph: GraphSpec  # defaulted
    reference: NotRequired[ReferenceSpec]
    critic: NotRequired[RoleSpec]


class PipelineServices(TypedDict, total=False):
    actor: str
    reference: str
    critic: str


class RLHFPipelineStatus(ObjectStatus, total=False):
    inferenceGraph: str
    inferenceServices: PipelineServices


class RLHFPipeline(TypedDict):
    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    spec: RLHFPipelineSpec
    status: NotRequired[RLHFPipelineStatus]
