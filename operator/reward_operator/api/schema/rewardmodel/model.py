"""spec.model (and the candidate's canary.model): which weights vLLM serves and how it runs them.

Its rules are about the model alone: a storage URI KServe can fetch, flags the operator owns kept out of
extraArgs, and the process-reward fields only on kind: process.
"""

from __future__ import annotations

from ..common import Schema, array, integer, obj, rule, string

MODEL_KINDS = ("sequence", "token", "process", "judge")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
# KServe's storage initializer reads each of these; https:// (and http:// inside a cluster's own
# network) fetches one file, which it unpacks when it is a .tar.gz, .tar or .zip of the model folder.
STORAGE_SCHEMES = ("hf", "s3", "gs", "pvc", "oci", "https", "http")

# KServe v0.20 parses the merged model container (runtime plus ISVC args and
# env) as a Go text/template to fill its placeholders: a literal "{{" there
# fails it, and the InferenceService never becomes Ready.
NO_GO_TEMPLATE = (
    "{field} may not contain '{{{{': KServe reads it as a Go template placeholder and refuses the "
    "InferenceService (a chat template belongs in model.chatTemplate)"
)

# vLLM flags the operator derives from the spec; extraArgs may not set them, or
# the rendered server would silently differ from what the spec says.
OWNED_VLLM_FLAGS = (
    "model",
    "port",
    "host",
    "runner",
    "convert",
    "served-model-name",
    "pooler-config",
    "tensor-parallel-size",
    "max-model-len",
    "dtype",
    "quantization",
    "max-num-batched-tokens",
    "chat-template",
)


def model_fields(prefix: str) -> dict[str, Schema]:
    """spec.model's fields; ``prefix`` names the field in the rules' messages (model, canary.model)."""
    return {
        "uri": string(
            "Where KServe's storage initializer fetches the weights: hf://org/model, "
            "s3://bucket/path, gs://bucket/path, pvc://claim/path, oci://registry/image:tag, or "
            "https://host/model.tar.gz (an archive of the model folder, unpacked by KServe; http:// too).",
            maxLength=2048,
            **{
                "x-kubernetes-validations": [
                    rule(
                        "self.matches('^(" + "|".join(STORAGE_SCHEMES) + r")://[^\\s]+$')",
                        f"{prefix}.uri must be a storage URI starting with "
                        + ", ".join(f"{s}://" for s in STORAGE_SCHEMES),
                    )
                ]
            },
        ),
        "kind": string(
            "What the model scores. sequence: one scalar per sequence (classification head, "
            "LAST-token pooling, raw logit). token: a token reward model (ALL pooling; the "
            "reward is the last value). process: a process reward model (STEP pooling; one "
            "score per step tag). judge: a generative judge, an instruction-tuned causal LM on vLLM's "
            "generate runner whose verdict on each item is its reward (spec.judge).",
            enum=list(MODEL_KINDS),
            default="sequence",
        ),
        "servedName": string(
            "Model name vLLM answers to (--served-model-name). Defaults to the RewardModel's name.",
            maxLength=253,
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
        ),
        "chatTemplate": string(
            "A Jinja chat template replacing the tokenizer's; mounted from a ConfigMap the RewardModel owns. "
            "Omit it (rather than leave it empty) to keep the tokenizer's.",
            minLength=1,
            maxLength=65536,
        ),
        "stepTagId": integer(
            "For kind: process, required: the token id of the step tag that ends each step (vLLM's step_tag_id), "
            "the id gateway.stepTag (default <extra_0>) has in the model's vocabulary, e.g. 151651 for "
            "Qwen2.5-Math-PRM. vLLM scores the steps at the tokens with this id.",
            minimum=0,
        ),
        "rewardTokenId": integer(
            "For kind: token, where the model's own scorer appends a reward token to the templated "
            "conversation and reads the score at it: that token's id (config.json's reward_token_id, e.g. "
            "92527 for InternLM2-Reward). The gateway then tokenizes each item through vLLM, appends this id "
            "unless the text already ends with it, and sends vLLM the ids. Unset for models scored at the "
            "conversation's own last token (Qwen2.5-Math-RM).",
            minimum=0,
        ),
        "returnedTokenIds": array(
            "For kind: process: the score head's labels vLLM returns per step (vLLM's returned_token_ids), "
            "[negative, positive]. These index the head's labels, not the vocabulary. The only value is [0, 1], "
            "which is also what unset means: vLLM's process model (Qwen2ForProcessRewardModel, as "
            "Qwen2.5-Math-PRM) has two labels, 1 the positive, and the gateway reads the softmax probability "
            "of the second as the step's score.",
            {"type": "integer", "format": "int64", "minimum": 0},
            minItems=2,
            maxItems=2,
            **{
                "x-kubernetes-validations": [
                    rule(
                        "self == [0, 1]",
                        f"{prefix}.returnedTokenIds may only be [0, 1] (or unset, the same): they index the score "
                        "head's [negative, positive] labels, not the vocabulary; [1, 0] inverts every score, one "
                        "label gives sigmoid(logit) instead of the step's probability, and an index past the two "
                        "labels stops vLLM's engine",
                    )
                ]
            },
        ),
        "maxModelLen": integer("Context length in tokens (--max-model-len).", minimum=16, maximum=4194304),
        "dtype": string("Weight and activation dtype (--dtype).", enum=list(DTYPES)),
        "quantization": string(
            "Quantization method vLLM applies (--quantization), e.g. fp8, awq, gptq.",
            maxLength=64,
            pattern=r"^[a-z0-9_-]+$",
        ),
        "tensorParallelSize": integer(
            "GPUs one replica shards the model across (--tensor-parallel-size).",
            minimum=1,
            maximum=64,
            default=1,
        ),
        "maxNumBatchedTokens": integer(
            "Tokens per scheduler step (--max-num-batched-tokens); raise it for reward models, which only prefill.",
            minimum=256,
        ),
        "extraArgs": array(
            "Further vLLM arguments, appended last. Flags the operator sets from this spec "
            "are refused here; set the matching field instead.",
            string("One argument, e.g. --gpu-memory-utilization=0.9.", maxLength=1024),
            maxItems=64,
            **{
                "x-kubernetes-validations": [
                    rule(
                        "self.all(a, !a.matches('^--(" + "|".join(OWNED_VLLM_FLAGS) + ")(=.*)?$'))",
                        f"{prefix}.extraArgs may not set --"
                        + ", --".join(OWNED_VLLM_FLAGS)
                        + f": the operator sets them from {prefix}'s other fields",
                    ),
                    rule("self.all(a, !a.contains('{{'))", NO_GO_TEMPLATE.format(field=f"{prefix}.extraArgs")),
                ]
            },
        ),
    }


MODEL = obj(
    "The reward model to serve and how vLLM runs it.",
    model_fields("model"),
    required=["uri"],
    **{
        "x-kubernetes-validations": [
            rule(
                "self.kind == 'process' || (!has(self.stepTagId) && !has(self.returnedTokenIds))",
                "model.stepTagId and model.returnedTokenIds apply only to kind: process",
            ),
            rule(
                "self.kind == 'token' || !has(self.rewardTokenId)",
                "model.rewardTokenId applies only to kind: token (a token reward model scored at a reward token)",
            ),
            rule(
                "self.kind != 'process' || has(self.stepTagId)",
                "model.stepTagId is required for kind: process: the token id of the step tag (gateway.stepTag, "
                "default <extra_0>) in the model's vocabulary; without it vLLM answers no step scores and every "
                "call fails",
            ),
        ]
    },
)
