# The trainers' own code (TRL, OpenRLHF, verl) against a served RewardModel: e2e/trainers, docs/trainers.md.
.PHONY: trainers trainers-venvs

TRAINERS := trl openrlhf verl

# Not in `make test`: the venvs are 6 GB in all (torch's CUDA wheels, which PyPI's torch cannot
# import without) and a few minutes to build cold; a served RewardModel on the real node adds more.
trainers-venvs: ## each trainer's pinned venv under ~/.cache/reward-operator/trainers, torch shared (e2e/trainers/venvs)
	@for trainer in $(TRAINERS); do TRAINER=$$trainer e2e/trainers/venvs/install.sh || exit 1; done

# The timeout covers the session fixture too: a test bed with the real node (its vLLM image imported
# into containerd: 8 min on 2 busy cores), then the RewardModel Ready (up to 15 min).
# TRAINERS_SERVE=local serves the model as local processes instead of the real node (no test bed).
trainers: venv vllm-venv trainers-venvs testenv-build host-packages ## TRL's GRPO, OpenRLHF's and verl's reward clients against a RewardModel's status.url on the real node; prints each one's max |diff| vs transformers
	REWARD_OPERATOR_REQUIRE_TRAINERS=1 $(PY) -m pytest e2e/trainers -q -p no:cacheprovider --timeout=2400
