"""The RewardModel API (serving.rlhf.dev/v1alpha1), defined once here."""

GROUP = "serving.rlhf.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
REWARD_MODEL_KIND = "RewardModel"
REWARD_MODEL_PLURAL = "rewardmodels"
CATEGORY = "rlhf"
