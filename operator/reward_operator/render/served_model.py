"""``predictor.model`` of a reward model, the stable one's or the candidate's.

Both run the same way: on spec.runtime or the default runtime for their kind's runner (pooling for the
score heads, generate for a judge) and their own GPUs, with vLLM's arguments for their kind and served
name, and the chat template (when they have one) read from the file the predictor's pods mount
(render/chat_template.py).
"""

from __future__ import annotations

from typing import Any

from . import chat_template
from .predictor import model, resources
from .runtime import engine_args, runtime
from .vllm_args import runner, vllm_args


def served_model(
    model_fields: dict[str, Any],
    compute: dict[str, Any],
    named_runtime: str | None,
    served_name: str,
    env: list[dict[str, Any]],
) -> dict[str, Any]:
    """``model_fields``: spec.model (or the candidate's, merged over it); ``compute``: its resources (gpus
    set); ``named_runtime``: spec.runtime, which wins over the default for the GPUs; ``env``: the model
    container's environment (render/predictor.model_env)."""
    templated = "chatTemplate" in model_fields
    return model(
        model_fields["uri"],
        runtime(named_runtime, compute["gpus"], runner(model_fields["kind"])),
        vllm_args(
            model_fields,
            served_name,
            chat_template.PATH if templated else None,
            engine_args(model_fields, compute, env),
        ),
        env,
        resources(compute),  # type: ignore[arg-type]
        [chat_template.volume_mount()] if templated else None,
    )
