"""Run by the pinned vLLM's interpreter (torch, transformers, tokenizers): tiny random-weight reward
models, and transformers' own number for given tokens.

Not imported by the tests (the main venv has no torch): ``reward_testing.tiny_models`` runs it as a
script with a JSON request on stdin and reads the ``RESULTS <json>`` line it prints.

Requests:

- ``{"make": {"dest": folder, "kinds": [kind, ...]}}``: writes ``<dest>/<kind>`` for each kind, each a
  ``save_pretrained`` folder in float32 (config, safetensors, a BPE tokenizer trained here). Same
  request, same bytes: the corpus, the tokenizer's training and the weights are seeded. Besides the
  three model kinds, ``internlm2``: a token model of InternLM2-Reward's architecture, scored at its
  reward token (see make_internlm2). ``"seed"``
  (optional) seeds the weights instead of the kind's own seed: another model of the same kind and
  tokenizer, whose scores order the same texts differently (a canary that disagrees). For an
  RLHFPipeline's actor and reference: ``causal`` (LlamaForCausalLM, generating; its critic is a token
  model of other weights: reward_testing.pipeline_cases). A generative judge: ``judge`` (LlamaForCausalLM
  with a tokenizer of its own in which the labels ``Yes``, ``No`` and ``1``..``9`` are one token each).
- ``{"score": {"model": folder, "kind": kind, "items": [...]}}``: for each item (``{"ids"}``,
  ``{"text", "add_special_tokens"?}``, or ``{"messages", "chat_template"?}``: the tokenizer's
  ``apply_chat_template``, the model's template or the given one), the token ids and what the
  reward gateway must answer for them: ``reward`` (sequence: the raw last-token logit; token: the
  last token's raw value; process: the min of the step scores; InternLM2ForRewardModel: its own
  scorer's, the value at the reward token it appends) and, for token and process models,
  ``values`` (each token's raw value(s)) and ``step_scores`` (p_positive at each step tag); a causal
  model answers ``logprobs``: each token's log-softmax under the tokens before it (None for the first); a
  judge, for an item with ``labels`` ({label: value}; ``add_generation_prompt`` true for a judge's messages),
  ``reward`` (the labels' values expected under the softmax over the whole vocabulary at the next position,
  renormalised over the labels), ``label_share`` and ``label_ids``, or ``refused`` (a label of several tokens).
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
    "internlm2": "InternLM2ForRewardModel",
    # an RLHFPipeline's actor and reference (vLLM's generate runner)
    "causal": "LlamaForCausalLM",
    # a generative judge (model.kind judge, vLLM's generate runner): a causal LM whose tokenizer keeps its labels whole
    "judge": "LlamaForCausalLM",
}
SEEDS = {"sequence": 1, "token": 2, "process": 3, "internlm2": 4, "causal": 5, "judge": 6}
NUM_LABELS = {"sequence": 1, "token": 1, "process": 2, "internlm2": 1}
# the model.kind each model is served as (causal: none, it generates)
MODEL_KINDS = {
    "sequence": "sequence",
    "token": "token",
    "process": "process",
    "internlm2": "token",
    "causal": "causal",
    "judge": "judge",
}
# the transformers class of the Llama-based kinds, saved with save_pretrained
LLAMA_CLASSES = {
    "sequence": "LlamaForSequenceClassification",
    "causal": "LlamaForCausalLM",
    "judge": "LlamaForCausalLM",
}
# A judge's tokenizer learns its verdict words too: lines that start with them (no space before, as they
# follow the chat template's generation prompt), so "Yes" and "No" are one token each, as "1".."9" are (one
# byte each); "10" and "Maybe" are not (a label the gateway must refuse).
JUDGE_WORDS = ("Yes", "No")
# InternLM2-Reward's reward token (config.json reward_token_id), added to the tokenizer of that model only
REWARD_TOKEN = "[UNUSED_TOKEN_130]"

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


def judge_corpus(lines: int = 200) -> list[str]:
    rng = random.Random(1)
    return [rng.choice(JUDGE_WORDS) + " " + " ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(lines)]


def make_tokenizer(model_max_length: int = SHAPE["max_position_embeddings"], judge: bool = False):
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
    tokenizer.train_from_iterator(corpus() + (judge_corpus() if judge else []), trainer=trainer)
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
    if kind == "internlm2":
        make_internlm2(dest, tokenizer, shape)
        return
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import LlamaConfig, Qwen2Config, Qwen2Model

    torch.manual_seed(SEEDS[kind] if seed is None else seed)
    dest.mkdir(parents=True, exist_ok=True)
    if kind in LLAMA_CLASSES:
        config = LlamaConfig(**_common(tokenizer, shape), head_dim=32, num_labels=NUM_LABELS.get(kind, 1))
        model = getattr(transformers, LLAMA_CLASSES[kind])(config).to(torch.float32).eval()
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


# InternLM2's config class is its checkpoints' own code (model_type internlm2 is in neither
# transformers nor vLLM's config registry): vLLM loads it from the model folder with
# --trust-remote-code. This is ours, the fields vLLM's internlm2.py reads and nothing else.
INTERNLM2_CONFIGURATION = '''"""InternLM2's configuration, for a tiny test model (reward_testing)."""

from transformers import PretrainedConfig


class InternLM2Config(PretrainedConfig):
    model_type = "internlm2"

    def __init__(self, reward_token_id=None, **kwargs):
        self.reward_token_id = reward_token_id
        super().__init__(**kwargs)
'''


def make_internlm2(dest: Path, tokenizer, shape: dict | None = None) -> None:
    """InternLM2-Reward's layout: its config (model_type internlm2, reward_token_id, its configuration
    module), InternLM2 weight names (a fused wqkv, w1/w3/w2, a v_head without bias) and a tokenizer
    holding the reward token. The weights are a random transformers LlamaModel's, rearranged: InternLM2's
    decoder is Llama's (RMSNorm, rotary, SiLU MLP) with other names and a fused qkv, so transformers'
    LlamaModel over the same numbers is an independent forward pass to check vLLM against."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaModel

    torch.manual_seed(SEEDS["internlm2"])
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.add_special_tokens({"additional_special_tokens": [STEP_TAG, *ROLE_TOKENS, REWARD_TOKEN]})
    config = _internlm2_llama_config(_common(tokenizer, shape))
    backbone = LlamaModel(config).to(torch.float32).eval()
    v_head = torch.empty(1, config.hidden_size).normal_(0.0, config.initializer_range)
    tensors = {name: value.contiguous() for name, value in _to_internlm2(backbone.state_dict(), config).items()}
    tensors["v_head.weight"] = v_head.contiguous()
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    reward_token_id = tokenizer.convert_tokens_to_ids(REWARD_TOKEN)
    fields = {**_common(tokenizer, shape), "rms_norm_eps": config.rms_norm_eps, "hidden_act": config.hidden_act}
    (dest / "configuration_internlm2.py").write_text(INTERNLM2_CONFIGURATION)
    (dest / "config.json").write_text(
        json.dumps(
            {
                **fields,
                "architectures": [ARCHITECTURES["internlm2"]],
                "model_type": "internlm2",
                "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config"},
                "reward_token_id": reward_token_id,
                "bias": False,
                "rope_theta": config.rope_parameters["rope_theta"],
                "rope_parameters": dict(config.rope_parameters),
            },
            indent=2,
            sort_keys=True,
        )
    )
    tokenizer.save_pretrained(dest)


def _internlm2_llama_config(fields: dict):
    from transformers import LlamaConfig

    config = LlamaConfig(**fields, head_dim=32, rms_norm_eps=1e-6, hidden_act="silu")
    config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    return config


# A layer's weights that only change their name between LlamaModel and InternLM2 (all but the fused wqkv)
_INTERNLM2_NAMES = (
    ("self_attn.o_proj", "attention.wo"),
    ("mlp.gate_proj", "feed_forward.w1"),
    ("mlp.up_proj", "feed_forward.w3"),
    ("mlp.down_proj", "feed_forward.w2"),
    ("input_layernorm", "attention_norm"),
    ("post_attention_layernorm", "ffn_norm"),
)


def _to_internlm2(state: dict, config) -> dict:
    """LlamaModel's weights under InternLM2's names. wqkv holds, for each KV head in turn, the query
    heads that share it, then its key, then its value (what vLLM's InternLM2Attention.split_qkv reads)."""
    import torch

    heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, 32
    group = heads // kv_heads
    out = {"model.tok_embeddings.weight": state["embed_tokens.weight"], "model.norm.weight": state["norm.weight"]}
    for layer in range(config.num_hidden_layers):
        llama, ours = f"layers.{layer}.", f"model.layers.{layer}."
        q = state[llama + "self_attn.q_proj.weight"].view(kv_heads, group, head_dim, -1)
        k = state[llama + "self_attn.k_proj.weight"].view(kv_heads, 1, head_dim, -1)
        v = state[llama + "self_attn.v_proj.weight"].view(kv_heads, 1, head_dim, -1)
        out[ours + "attention.wqkv.weight"] = torch.cat([q, k, v], dim=1).reshape(-1, config.hidden_size)
        for llama_name, internlm2_name in _INTERNLM2_NAMES:
            out[f"{ours}{internlm2_name}.weight"] = state[f"{llama}{llama_name}.weight"]
    return out


def _from_internlm2(tensors: dict, config) -> dict:
    """The inverse of _to_internlm2: InternLM2's weights as LlamaModel's state dict."""
    heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, 32
    group = heads // kv_heads
    state = {"embed_tokens.weight": tensors["model.tok_embeddings.weight"], "norm.weight": tensors["model.norm.weight"]}
    for layer in range(config.num_hidden_layers):
        llama, ours = f"layers.{layer}.", f"model.layers.{layer}."
        qkv = tensors[ours + "attention.wqkv.weight"].view(kv_heads, group + 2, head_dim, -1)
        state[llama + "self_attn.q_proj.weight"] = qkv[:, :group].reshape(-1, config.hidden_size)
        state[llama + "self_attn.k_proj.weight"] = qkv[:, group].reshape(-1, config.hidden_size)
        state[llama + "self_attn.v_proj.weight"] = qkv[:, group + 1].reshape(-1, config.hidden_size)
        for llama_name, internlm2_name in _INTERNLM2_NAMES:
            state[f"{llama}{llama_name}.weight"] = tensors[f"{ours}{internlm2_name}.weight"]
    return state


def score_internlm2(folder: str, tokenizer, items: list[dict]) -> list[dict]:
    """What InternLM2-Reward's own scorer (get_score) answers: the conversation templated once and
    tokenized, its reward token appended (once: a text already ending with it keeps its one), and the
    v_head's value at that last position; computed by transformers' LlamaModel over the same weights."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaModel

    raw = json.loads((Path(folder) / "config.json").read_text())
    fields = {key: raw[key] for key in (*SHAPE, "vocab_size", "bos_token_id", "eos_token_id", "pad_token_id")}
    config = _internlm2_llama_config({**fields, "tie_word_embeddings": False})
    tensors = load_file(str(Path(folder) / "model.safetensors"))
    backbone = LlamaModel(config).to(torch.float32).eval()
    backbone.load_state_dict(_from_internlm2(tensors, config))
    v_head = tensors["v_head.weight"]
    reward_token_id = raw["reward_token_id"]
    answers = []
    with torch.no_grad():
        for item in items:
            ids = item_ids(tokenizer, item)
            if not ids or ids[-1] != reward_token_id:
                ids = [*ids, reward_token_id]
            hidden = backbone(input_ids=torch.tensor([ids])).last_hidden_state[0]
            values = hidden @ v_head.T  # [tokens, 1]
            answers.append({"ids": ids, "values": values.tolist(), "reward": float(values[-1, 0])})
    return answers


def make(request: dict) -> dict:
    dest = Path(request["dest"])
    made = {}
    shared = make_tokenizer()
    for kind in request["kinds"]:
        # InternLM2's adds its reward token to a tokenizer of its own; a judge's learns its verdict words
        tokenizer = make_tokenizer(judge=kind == "judge") if kind in ("internlm2", "judge") else shared
        # "shape": SHAPE's keys to change (a benchmark's larger model); head_dim stays 32
        make_model(kind, dest / kind, tokenizer, request.get("shape"), request.get("seed"))
        made[kind] = {
            "path": str(dest / kind),
            "kind": MODEL_KINDS[kind],
            "architecture": ARCHITECTURES[kind],
            "step_tag_id": tokenizer.convert_tokens_to_ids(STEP_TAG),
            "bos_token_id": tokenizer.bos_token_id,
            "reward_token_id": tokenizer.convert_tokens_to_ids(REWARD_TOKEN) if kind == "internlm2" else None,
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
        add_generation_prompt=item.get("add_generation_prompt", False),
        return_dict=False,
    )
    if isinstance(ids, dict):  # transformers 5 may answer a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


def score(request: dict) -> list[dict]:
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Model

    folder, kind = request["model"], request["kind"]
    if json.loads((Path(folder) / "config.json").read_text()).get("model_type") == "internlm2":
        # its config is remote code; the tokenizer is a plain fast one, loaded without asking to trust it
        return score_internlm2(folder, PreTrainedTokenizerFast.from_pretrained(folder), request["items"])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    step_tag_id = tokenizer.convert_tokens_to_ids(STEP_TAG)
    config = AutoConfig.from_pretrained(folder)
    architecture = (config.architectures or [""])[0]
    llama_kind = next((k for k, name in LLAMA_CLASSES.items() if name == architecture), None)
    if llama_kind is not None:
        model = getattr(transformers, architecture).from_pretrained(folder, torch_dtype=torch.float32).eval()
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
            if llama_kind == "sequence":
                answers.append({"ids": ids, "reward": float(model(input_ids=input_ids).logits[0, 0])})
                continue
            if kind == "judge":  # a causal LM, as the actor's: told apart by the kind it is served as
                answers.append(judge_verdict(tokenizer, model, ids, item["labels"]))
                continue
            if llama_kind == "causal":
                # token i's log-probability given tokens 0..i-1: log-softmax of the logits at i-1
                logprobs = torch.log_softmax(model(input_ids=input_ids).logits[0].double(), dim=-1)
                picked = [float(logprobs[i - 1, ids[i]]) for i in range(1, len(ids))]
                answers.append({"ids": ids, "logprobs": [None, *picked]})
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


def judge_verdict(tokenizer, model, ids: list[int], labels: dict[str, float]) -> dict:
    """A judge's label-probability verdict as transformers gives it: the softmax over the whole vocabulary at
    the position after ``ids`` (float64), renormalised over the labels (each one token, or refused)."""
    import torch

    label_ids = {}
    for label in labels:
        tokens = tokenizer(label, add_special_tokens=False)["input_ids"]
        if len(tokens) != 1:
            return {"ids": ids, "refused": label, "tokens": tokens}
        label_ids[label] = tokens[0]
    logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    probabilities = torch.softmax(logits, dim=-1)
    held = {label: float(probabilities[token]) for label, token in label_ids.items()}
    share = sum(held.values())
    return {
        "ids": ids,
        "label_ids": label_ids,
        "reward": sum(labels[label] * p for label, p in held.items()) / share,
        "label_share": share,
    }


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
