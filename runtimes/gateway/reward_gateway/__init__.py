"""Reward gateway: the trainers' wire formats in front of a vLLM pooling server."""
