"""A generative judge as a reward model: its prompts, its calls and how its verdict becomes a reward."""
