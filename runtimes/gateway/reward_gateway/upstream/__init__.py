"""The one client of the vLLM predictor: keep-alive HTTP calls, with vLLM's failures mapped to the gateway's errors."""
