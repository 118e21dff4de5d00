"""Every condition type and reason the operator writes, each with what it means.

`kubectl describe` readers, alert authors and the Argo CD health check
(manifests/argocd/health/rewardmodel.lua) read these; a unit test keeps the
health check's Degraded rule in line with :data:`DEGRADED_REASONS`.
"""

from __future__ import annotations

# ---- condition types --------------------------------------------------------

READY = "Ready"  # the reward model answers requests at status.url
# With spec.canary only (removed with it):
CANARY_READY = "CanaryReady"  # the candidate's predictor (KServe's canary) is Ready
CANARY_PROGRESSING = "CanaryProgressing"  # the rollout moves (or may move) on; False: it stopped, see reason
CANARY_CONDITIONS = (CANARY_READY, CANARY_PROGRESSING)
# With serving.minReplicas 0 only (removed otherwise): the predictor is at zero replicas. Ready stays True
# while it sleeps (policy/scaling.py says why).
SCALED_TO_ZERO = "ScaledToZero"

# With spec.cache only (removed with it):
MODEL_CACHED = "ModelCached"  # every node of the cache's node groups holds a copy of spec.model.uri

# ---- reasons for Ready --------------------------------------------------------

INFERENCE_SERVICE_READY = "InferenceServiceReady"  # KServe reports the InferenceService Ready
INFERENCE_SERVICE_NOT_READY = "InferenceServiceNotReady"  # KServe reports it not Ready, without a reason
AWAITING_KSERVE = "AwaitingKServe"  # applied; KServe has not reported on it yet
GATEWAY_NOT_READY = "GatewayNotReady"  # KServe reports Ready, the reward gateway (transformer) is not yet
INVALID_SPEC = "InvalidSpec"  # the schema accepted the spec but the cluster cannot honour it
APPLY_FAILED = "ApplyFailed"  # the API server refused a rendered child
# With spec.cache: the InferenceService is not created until ModelCached is True: Unknown while the
# copies download; False when a download failed or the cache cannot be made (Degraded in Argo CD)
AWAITING_MODEL_CACHE = "AwaitingModelCache"
MODEL_CACHE_FAILED = "ModelCacheFailed"

# KServe's failure reasons (lastFailureInfo.reason) that Ready passes on: the
# spec will not serve until someone changes it or the model.
KSERVE_FAILURE_REASONS = (
    "NoSupportingRuntime",  # the runtime does not support the model format or protocol
    "RuntimeNotRecognized",  # no runtime of that name
    "RuntimeDisabled",  # the runtime is disabled
    "InvalidPredictorSpec",  # KServe refused the predictor (e.g. a template placeholder it cannot parse)
    "ModelLoadFailed",  # the storage initializer or the runtime failed to load the model
    "RuntimeUnhealthy",  # the runtime container does not start or stay up
)

# Kubernetes' own reasons for a container of the InferenceService's pods (predictor, transformer, or
# their init containers such as KServe's storage initializer) that does not run, passed on verbatim when
# KServe says not Ready without a failure reason of its own (policy/pods.py reads the pods). Ready is
# False with one of these until the pod is ready again; the message names the component, pod, container,
# restart count, the last termination's reason and exit code, and its termination message's last line.
OOM_KILLED = "OOMKilled"  # last terminated for its memory limit: the limit is below what the model needs
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"  # restarted after exiting (or not ready since): see the exit code
# terminated in a pod that does not restart it (restartPolicy Never or OnFailure; KServe's Deployment pods
# restart theirs, so their first exit is already CrashLoopBackOff): Error carries an exit code
CONTAINER_TERMINATED_REASONS = ("Error", "ContainerCannotRun", "StartError", "DeadlineExceeded")
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"  # the image cannot be pulled (name, tag, registry credentials)
ERR_IMAGE_PULL = "ErrImagePull"  # the same, an attempt failing now (the two alternate: the one reported first stays)
# the container cannot be created: a Secret or ConfigMap key it names is missing, a bad image name, ...
CONTAINER_CONFIG_REASONS = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RunContainerError",
    "PreStartHookError",
    "PostStartHookError",
)
POD_FAILURE_REASONS = (
    OOM_KILLED,
    CRASH_LOOP_BACK_OFF,
    *CONTAINER_TERMINATED_REASONS,
    IMAGE_PULL_BACK_OFF,
    ERR_IMAGE_PULL,
    *CONTAINER_CONFIG_REASONS,
)

# Reasons that mean "the current spec was judged and failed": Argo CD shows
# Degraded for these (and any reason ending in Failed), Progressing for
# everything else that is not Ready.
DEGRADED_REASONS = (INVALID_SPEC, APPLY_FAILED, *KSERVE_FAILURE_REASONS, *POD_FAILURE_REASONS)
DEGRADED_SUFFIX = "Failed"

# ---- reasons for ScaledToZero -----------------------------------------------------
# (AWAITING_KSERVE too: Unknown, KServe has made no predictor Deployment yet)

IDLE = "Idle"  # True: the autoscaler took the predictor to zero; the next request wakes it (a cold start)
SCALING_UP = "ScalingUp"  # False: the autoscaler asked for replicas, none is ready yet
ACTIVE = "Active"  # False: predictor replicas are ready

# ---- reasons for ModelCached -------------------------------------------------------

CACHE_DOWNLOADED = "Downloaded"  # True: KServe reports a copy on every node of the node groups
CACHE_DOWNLOADING = "Downloading"  # Unknown: copies are still downloading (or KServe has not reported yet)
CACHE_DOWNLOAD_FAILED = "DownloadFailed"  # False: a node's download failed (KServe's NodeDownloadError)
CACHE_NO_NODES = "NoNodes"  # False: the node groups select no node, so there is nowhere to cache
CACHE_CONFLICT = "CacheConflict"  # False: the shared cache's settings differ from this spec's

# ---- reasons for CanaryReady ------------------------------------------------------

CANDIDATE_READY = "CandidateReady"  # True: KServe reports the canary predictor's Deployment available
CANDIDATE_NOT_READY = "CandidateNotReady"  # False: KServe reports it not available (yet, or any more)
AWAITING_CANDIDATE = "AwaitingCandidate"  # Unknown: KServe has not reported on the canary yet

# ---- reasons for CanaryProgressing ---------------------------------------------------
# (AWAITING_CANDIDATE too: Unknown, the share is held at 0 until the candidate is Ready)

SHADOWING = "Shadowing"  # True: shadow mode; both models score, the figures are in status.canary
STEP_RUNNING = "StepRunning"  # True: a split step runs; it advances after the interval while the gates hold
AWAITING_EVIDENCE = "AwaitingEvidence"  # True: the interval passed, too few pairs or calls compared to judge yet
ROLLOUT_COMPLETE = "RolloutComplete"  # False: the last step holds; promote the candidate in Git
ROLLED_BACK = "RolledBack"  # False: a gate failed; share 0 (one Warning event) until the rollout changes
GATE_FAILED = "GateFailed"  # False: shadow mode, a gate fails (one Warning event); nothing to roll back

# CanaryProgressing reasons worth a Warning event, once, on the transition into them.
CANARY_WARNING_REASONS = (ROLLED_BACK, GATE_FAILED)

# ---- RLHFPipeline -------------------------------------------------------------------
# One condition per role, each decided like a RewardModel's Ready (policy/pipeline.py); Ready is True when
# every one of them is, else it carries the first role's reason that is not, its message naming the role.

ACTOR_READY = "ActorReady"  # the actor's InferenceService (Ready's reasons above)
REFERENCE_READY = "ReferenceReady"  # the reference's InferenceService (Ready's reasons above)
CRITIC_READY = "CriticReady"  # with spec.critic only (removed without): the critic's InferenceService
REWARDS_READY = "RewardsReady"  # every RewardModel spec.rewards names is Ready, with its gateway
GRAPH_READY = "GraphReady"  # KServe reports the InferenceGraph (its router) Ready
PIPELINE_ROLE_CONDITIONS = (ACTOR_READY, REFERENCE_READY, CRITIC_READY, REWARDS_READY, GRAPH_READY)

# Reasons for Ready when every role is Ready, and for RewardsReady and GraphReady:
ROLES_READY = "RolesReady"  # Ready True: every role is Ready; the graph answers at status.url
REWARD_MODELS_READY = "RewardModelsReady"  # RewardsReady True: every named RewardModel is Ready
# RewardsReady False (and Ready False): a RewardModel spec.rewards names does not exist
# in the pipeline's namespace; the InferenceGraph is not created (or left as it was) until it does.
REWARD_MODEL_NOT_FOUND = "RewardModelNotFound"
# RewardsReady False: a named RewardModel has gateway.enabled: false; the graph's reward steps call its
# gateway, so the graph is held as for a missing one.
REWARD_MODEL_WITHOUT_GATEWAY = "RewardModelWithoutGateway"
# RewardsReady False / Unknown: a named RewardModel is not Ready; the message carries its own reason.
REWARD_MODEL_NOT_READY = "RewardModelNotReady"
GRAPH_SERVING = "InferenceGraphReady"  # GraphReady True: KServe reports the InferenceGraph Ready
GRAPH_NOT_READY = "InferenceGraphNotReady"  # GraphReady False / Unknown: KServe reports it not Ready (yet)
# GraphReady Unknown: the graph is held until the reward models it calls exist (see RewardsReady)
AWAITING_REWARD_MODELS = "AwaitingRewardModels"

# ---- events ---------------------------------------------------------------------------
# Ready=False reasons that need a person: a Warning event on the transition into them (as Kubernetes'
# own controllers keep Warning for what needs action). The spec or the model is wrong, a container
# fails, the cache cannot be made, a RewardModel a pipeline names is missing or has no gateway; and
# any reason ending in Failed (KServe's, Knative's). Every other transition of Ready is progress and
# gets a Normal event: True, Unknown, and False while KServe is still at work (AwaitingKServe, a
# component's reason such as PredictorReady, "Predictor ingress not created" or
# MinimumReplicasUnavailable, InferenceServiceNotReady, AwaitingModelCache, GatewayNotReady,
# RewardModelNotReady).
WARNING_REASONS = (
    *DEGRADED_REASONS,
    MODEL_CACHE_FAILED,
    CACHE_DOWNLOAD_FAILED,
    CACHE_NO_NODES,
    CACHE_CONFLICT,
    REWARD_MODEL_NOT_FOUND,
    REWARD_MODEL_WITHOUT_GATEWAY,
    *CANARY_WARNING_REASONS,
)

# ---- RewardBatch ---------------------------------------------------------------------
# A batch's conditions follow its Job's (Complete, Failed) with two of its own before it: Admitted (a Job
# exists and is not suspended) and Running (shards are being scored). Complete is the one kubectl wait and the
# runner's event per transition follow; each other condition's move to True is one event of its own.

COMPLETE = "Complete"  # every shard finished: the output holds every row, each with its reward or its failure
ADMITTED = "Admitted"  # the Job runs: created (and, with spec.queueName, admitted by Kueue)
RUNNING = "Running"  # shards are being scored now
FAILED = "Failed"  # a shard failed past its retries (or the worker refused it): the batch will not complete
BATCH_CONDITIONS = (ADMITTED, RUNNING, FAILED)

# Reasons for Complete
SHARDS_SUCCEEDED = "ShardsSucceeded"  # True: every shard's pod finished and committed its manifest
SCORING = "Scoring"  # Unknown: shards are being scored (or wait for a pod)
SHARDS_FAILED = "ShardsFailed"  # False: a shard failed; its rows are missing from the output (see Failed)
# Unknown, and Admitted False: the RewardModel spec.rewardModel names does not exist, has its gateway
# disabled (REWARD_MODEL_WITHOUT_GATEWAY), or has never served (no status.url yet): no Job until it does
REWARD_MODEL_NOT_SERVING = "RewardModelNotServing"
# Unknown, and Admitted False: the PersistentVolumeClaim a pvc:// URI names does not exist
CLAIM_NOT_FOUND = "PersistentVolumeClaimNotFound"
# Unknown, and Admitted False: spec.s3SecretName's Secret does not exist, or lacks a key of KServe's S3 convention
S3_SECRET_NOT_FOUND = "S3SecretNotFound"
# Unknown, and Admitted False: the Job of an earlier spec or model revision still has pods, which write to the
# same output: the new Job starts once they are gone
AWAITING_PREVIOUS_JOB = "AwaitingPreviousJob"
# Unknown, and Admitted False: the Job waits suspended for Kueue to admit it (spec.queueName)
AWAITING_ADMISSION = "AwaitingAdmission"

# Reasons for Admitted True, Running and Failed
JOB_ADMITTED = "JobAdmitted"  # the Job is not suspended (Kueue admitted it, or no queue is named)
SHARDS_ACTIVE = "ShardsActive"  # Running True: pods are scoring
NO_ACTIVE_SHARDS = "NoActiveShards"  # Running False
SHARD_FAILED = "ShardFailed"  # Failed True: the message names the shards and their worker's last words
NO_FAILED_SHARDS = "NoFailedShards"  # Failed False
