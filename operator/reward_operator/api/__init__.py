"""The project's API: names, conditions, KServe's vocabulary, schemas and typed views.

No I/O here and no imports from the rest of reward_operator: every other layer
(render, policy, cluster, controllers) reads its names from this package.
"""

GROUP = "serving.rlhf.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "rlhf"

REWARD_MODEL_KIND = "RewardModel"
REWARD_MODEL_PLURAL = "rewardmodels"

RLHF_PIPELINE_KIND = "RLHFPipeline"
RLHF_PIPELINE_PLURAL = "rlhfpipelines"

REWARD_BATCH_KIND = "RewardBatch"
REWARD_BATCH_PLURAL = "rewardbatches"
