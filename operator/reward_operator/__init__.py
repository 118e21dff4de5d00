"""reward-operator: serves RLHF reward models on KServe with vLLM."""

__version__ = "0.1.0"
