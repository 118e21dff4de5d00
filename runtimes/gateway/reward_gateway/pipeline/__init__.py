"""A gateway in an RLHFPipeline role: the routes KServe's InferenceGraph router calls, and the actor's
combined reward."""
