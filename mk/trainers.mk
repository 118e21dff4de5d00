# The trainers' venvs, for the trainers suite (e2e/suites/trainers, docs/trainers.md) and the wake suite's OpenRLHF.
.PHONY: trainers-venvs

##@ Trainers' venvs

TRAINERS := trl openrlhf verl

# 6 GB in all (torch's CUDA wheels, which PyPI's torch cannot import without), a few minutes to build cold.
trainers-venvs: ## each trainer's pinned venv, torch shared (in the cache)
	@for trainer in $(TRAINERS); do $(MAKE) --no-print-directory trainer-venv-$$trainer || exit 1; done

# not a file, and no intermediate one for make to delete after a suite that needs it
.SECONDARY: $(addprefix trainer-venv-,$(TRAINERS))
trainer-venv-%: ## one trainer's venv (trl, openrlhf, verl)
	TRAINER=$* e2e/suites/trainers/venvs/install.sh
