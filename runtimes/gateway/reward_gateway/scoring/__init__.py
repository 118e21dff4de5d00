"""Items to rewards through vLLM: the scorer of each kind, coalescing and fair queueing of calls, per-item
answers, chat templates."""
