"""Run by the pinned vLLM's interpreter (torch, transformers, tokenizers): tiny random-weight reward
models, and transformers' own number for given tokens.

Not imported by the tests (the main venv has no torch): ``reward_testing.tiny_models`` runs it as a
script with a JSON request on stdin and reads the ``RESULTS <json>`` line it prints.

Requests:

- ``{"make": {"dest": folder, "kinds": [kind, ...]}}``: writes ``<dest>/<kind>`` for each kind, each a
  ``save_pretrained`` folder in float32 (config, safetensors, a BPE tokenizer trained here). Same
  request, same bytes: the corpus, the tokenizer's training and the weights are seeded. ``"seed"``
  (optional) seeds the weights instead of the kind's own seed: another model of the same kind and
  tokenizer, whose scores order the same texts differently (a canary that disagrees).
- ``{"score": {"model": folder, "kind": kind, "items": [...]}}``: for each item (``{"ids"}``,
  ``{"text", "add_special_tokens"?}``, or ``{"messages", "chat_template"?}``: the tokenizer's
  ``apply_chat_template``, the model's template or the given one), the token ids and what the
  reward gateway must answer for them: ``reward`` (sequence: the raw last-token logit; token: the
  last token's raw value; process: the min of the step scores) and, for token and process models,
  ``values`` (each token's raw value(s)) and ``step_scores`` (p_positive at each step tag).
- ``{"scores": {name: <a score request>}}``: several at once, answered ``{name: answers}``.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
STEP_TAG = "<extra_0>"  # the reward gateway's default REWARD_GATEWAY_STEP_TAG (Qwen2.5-Math-PRM's)
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
SPECIAL_TOKENS = [PAD, BOS, EOS, STEP_TAG, *ROLE_TOKENS]  # ids 0..7 in this order
VOCAB_SIZE = 512

# Writes its own BOS (so a caller must not add another) and no EOS; no generation prompt unless asked.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

# kind -> architecture vLLM 0.32 serves for the operator's rendering of that kind
# (operator/reward_operator/render/vllm_args.py): sequence is converted to classify, token and
# process run their native pooling models.
ARCHITECTURES = {
    "sequence": "LlamaForSequenceClassification",
    "token": "Qwen2ForRewardModel",
    "process": "Qwen2ForProcessRewardModel",
}
SEEDS = {"sequence": 1, "token": 2, "process": 3}
NUM_LABELS = {"sequence": 1, "token": 1, "process": 2}

# hidden 128 over 4 heads: head_dim 32, one vLLM's CPU attention supports (16 kills its engine)
SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    # larger than transformers' 0.02, so scores spread across inputs instead of sitting near 0
    "initializer_range": 0.2,
}

WORD_LIST = (
    "the a reward model scores each answer step by step first then next so because if not and or "
    "two three four five seven ten plus minus times equals sum total number result answer question "
    "solve find compute check value final correct wrong maybe sure think let us we you it is are was "
    "cat dog tree river city music light paper stone water green blue quick slow small large old new"
)
WORDS = WORD_LIST.split()


def corpus(lines: int = 600) -> list[str]:
    rng = random.Random(0)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) + rng.choice([".", "?", "!", ""])
        for _ in range(lines)
    ]


def make_tokenizer(model_max_length: int = SHAPE["max_position_embeddings"]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    # add_special_tokens=True puts one BOS in front, as Llama's tokenizers do
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[STEP_TAG, *ROLE_TOKENS],
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def _common(tokenizer, shape: dict | None = None) -> dict:
    return {
        **SHAPE,
        **(shape or {}),
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }


def make_model(kind: str, dest: Path, tokenizer, shape: dict | None = None, seed: int | None = None) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForSequenceClassification, Qwen2Config, Qwen2Model

    torch.manual_seed(SEEDS[kind] if seed is None else seed)
    dest.mkdir(parents=True, exist_ok=True)
    if kind == "sequence":
        config = LlamaConfig(**_common(tokenizer, shape), head_dim=32, num_labels=1)
        model = LlamaForSequenceClassification(config).to(torch.float32).eval()
        model.save_pretrained(dest)
    else:
        # transformers has no Qwen2 reward classes (the checkpoints carry their own code): the
        # backbone is transformers' Qwen2Model, the head the checkpoints' score head
        # (Linear, ReLU, Linear), as vLLM's qwen2_rm.py loads it.
        config = Qwen2Config(**_common(tokenizer, shape), num_labels=NUM_LABELS[kind])
        config.architectures = [ARCHITECTURES[kind]]
        backbone = Qwen2Model(config).to(torch.float32).eval()
        head = _score_head(config)
        tensors = {f"model.{name}": value.contiguous() for name, value in backbone.state_dict().items()}
        tensors.update({f"score.{name}": value.contiguous() for name, value in head.state_dict().items()})
        save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(dest)
    tokenizer.save_pretrained(dest)


def _score_head(config):
    import torch
    from torch import nn

    head = nn.Sequential(
        nn.Linear(config.hidden_size, config.hidden_size),
        nn.ReLU(),
        nn.Linear(config.hidden_size, config.num_labels),
    )
    with torch.no_grad():
        for layer in (head[0], head[2]):
            layer.weight.normal_(0.0, config.initializer_range)
            layer.bias.normal_(0.0, config.initializer_range)
    return head.to(torch.float32).eval()


def make(request: dict) -> dict:
    tokenizer = make_tokenizer()
    dest = Path(request["dest"])
    made = {}
    for kind in request["kinds"]:
        # "shape": SHAPE's keys to change (a benchmark's larger model); head_dim stays 32
        make_model(kind, dest / kind, tokenizer, request.get("shape"), request.get("seed"))
        made[kind] = {
            "path": str(dest / kind),
            "architecture": ARCHITECTURES[kind],
            "step_tag_id": tokenizer.convert_tokens_to_ids(STEP_TAG),
            "bos_token_id": tokenizer.bos_token_id,
        }
    return made


def item_ids(tokenizer, item: dict) -> list[int]:
    if "ids" in item:
        return list(item["ids"])
    if "text" in item:
        return tokenizer(item["text"], add_special_tokens=item.get("add_special_tokens", False))["input_ids"]
    ids = tokenizer.apply_chat_template(
        item["messages"],
        chat_template=item.get("chat_template"),
        tokenize=True,
        add_generation_prompt=False,
        return_dict=False,
    )
    if isinstance(ids, dict):  # transformers 5 may answer a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


def score(request: dict) -> list[dict]:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoTokenizer, LlamaForSequenceClassification, Qwen2Model

    folder, kind = request["model"], request["kind"]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    step_tag_id = tokenizer.convert_tokens_to_ids(STEP_TAG)
    config = AutoConfig.from_pretrained(folder)
    if kind == "sequence":
        model = LlamaForSequenceClassification.from_pretrained(folder, torch_dtype=torch.float32).eval()
    else:
        tensors = load_file(str(Path(folder) / "model.safetensors"))
        backbone = Qwen2Model(config).to(torch.float32).eval()
        backbone.load_state_dict({k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")})
        head = _score_head(config)
        head.load_state_dict({k.removeprefix("score."): v for k, v in tensors.items() if k.startswith("score.")})
    answers = []
    with torch.no_grad():
        for item in request["items"]:
            ids = item_ids(tokenizer, item)
            input_ids = torch.tensor([ids])
            if kind == "sequence":
                answers.append({"ids": ids, "reward": float(model(input_ids=input_ids).logits[0, 0])})
                continue
            logits = head(backbone(input_ids=input_ids).last_hidden_state)[0]  # [tokens, labels]
            answer = {"ids": ids, "values": logits.tolist()}
            if kind == "token":
                answer["reward"] = float(logits[-1, -1])
            else:
                # Qwen2.5-Math-PRM's own rule: softmax over the two labels at each step tag, p_positive
                probabilities = torch.softmax(logits, dim=-1)
                steps = [float(probabilities[i, 1]) for i, token in enumerate(ids) if token == step_tag_id]
                answer["step_scores"] = steps
                answer["reward"] = min(steps) if steps else None
            answers.append(answer)
    return answers


def main() -> None:
    request = json.load(sys.stdin)
    if "make" in request:
        result = make(request["make"])
    elif "score" in request:
        result = score(request["score"])
    else:  # {"scores": {name: score request}}: several models in one process (one torch import)
        result = {name: score(job) for name, job in request["scores"].items()}
    print("RESULTS " + json.dumps(result))


if __name__ == "__main__":
    main()
