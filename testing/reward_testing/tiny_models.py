"""Tiny random-weight reward models the tests make, and transformers' number for them.

The models are written by ``tiny_model_maker.py`` under the pinned vLLM's interpreter (it has torch,
transformers and tokenizers; the main venv has none), one folder per kind, each what the operator's
``model.kind`` renders vLLM for (``render/vllm_args.py``):

| kind | architecture | what the gateway answers |
|---|---|---|
| sequence | LlamaForSequenceClassification, 1 label | the raw last-token logit |
| token | Qwen2ForRewardModel (score head Linear, ReLU, Linear) | the last token's raw value |
| process | Qwen2ForProcessRewardModel, 2 labels | p_positive (softmax) at each step tag ``<extra_0>`` |

Made only when asked for, ``judge``: a generative judge (LlamaForCausalLM, ``kind`` judge) whose tokenizer
keeps ``Yes``, ``No`` and ``1``..``9`` whole; its reference is transformers' softmax over the whole vocabulary
after the judge's prompt (``add_generation_prompt``), renormalised over the labels. And ``internlm2``: a token
model (``kind`` token) of InternLM2-Reward's layout (``InternLM2ForRewardModel``, its own configuration module,
so vLLM needs ``--trust-remote-code``),
whose tokenizer holds the reward token ``[UNUSED_TOKEN_130]`` (``reward_token_id``); its reference is
its own scorer's, the value at the reward token appended after the templated conversation.

All float32, hidden 128, head_dim 32 (vLLM's CPU attention), a BPE tokenizer of 512 trained here with
``<s>`` (BOS, added by ``add_special_tokens``), ``</s>``, ``<pad>`` and a chat template that writes
its own BOS. Deterministic: the same bytes every time.

    models = tiny_models          # the session fixture: {kind: TinyModel}
    answers = reference_scores(models["process"], [{"messages": [...]}, {"text": "...<extra_0>"}])
    archive = tar_model(models["sequence"], tmp_path / "model.tar.gz")
"""

from __future__ import annotations

import gzip
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reward_testing.vllm import run_in_vllm

MAKER = Path(__file__).with_name("tiny_model_maker.py")
KINDS = ("sequence", "token", "process")
STEP_TAG = "<extra_0>"
BOS = "<s>"


@dataclass(frozen=True)
class TinyModel:
    kind: str
    path: Path
    architecture: str
    step_tag_id: int  # the step tag's token id (a process model's stepTagId)
    bos_token_id: int
    reward_token_id: int | None = None  # the reward token's id (a model's model.rewardTokenId), InternLM2's only


def make_tiny_models(
    dest: Path, kinds: tuple[str, ...] = KINDS, shape: dict[str, int] | None = None, seed: int | None = None
) -> dict[str, TinyModel]:
    """Write one model folder per kind under ``dest`` (``dest/<kind>``), under the vLLM interpreter; ``kinds``
    may also name ``internlm2`` (served as kind token). ``shape`` changes the model's size (keys of
    tiny_model_maker.SHAPE; head_dim stays 32); ``seed`` draws other weights (same architecture and
    tokenizer) than the kind's own seed."""
    request = {"dest": str(dest), "kinds": list(kinds), "shape": shape, "seed": seed}
    made, _ = run_in_vllm(MAKER, {"make": request})
    return {
        name: TinyModel(
            m["kind"], Path(m["path"]), m["architecture"], m["step_tag_id"], m["bos_token_id"], m["reward_token_id"]
        )
        for name, m in made.items()
    }


def reference_scores(model: TinyModel, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """transformers' forward pass over each item, in one process. An item is ``{"ids": [...]}``,
    ``{"text": str, "add_special_tokens"?: bool}`` (default false, as the gateway sends finished text)
    or ``{"messages": [...], "chat_template"?: str}`` (``apply_chat_template``, no generation prompt).
    Each answer: ``ids`` (the tokens scored), ``reward`` (what the gateway must answer), and for token
    and process models ``values`` (each token's raw head output) and, for process models,
    ``step_scores`` (p_positive at each step tag; ``reward`` is their min, the gateway's default)."""
    answers, _ = run_in_vllm(MAKER, {"score": {"model": str(model.path), "kind": model.kind, "items": items}})
    return answers


def reference_scores_of(jobs: dict[str, tuple[TinyModel, list[dict[str, Any]]]]) -> dict[str, list[dict[str, Any]]]:
    """``reference_scores`` for several models in one process (torch and transformers load once):
    ``{name: (model, items)}`` -> ``{name: answers}``."""
    request = {
        name: {"model": str(model.path), "kind": model.kind, "items": items} for name, (model, items) in jobs.items()
    }
    answers, _ = run_in_vllm(MAKER, {"scores": request})
    return answers


def tar_model(model: TinyModel | Path, archive: Path) -> Path:
    """The model folder as a .tar.gz with its files at the top level (what KServe's storage initializer
    unpacks into /mnt/models from an http(s) URI ending in .tar.gz)."""
    folder = model.path if isinstance(model, TinyModel) else model
    # gzip's own header carries a time and a name: zero and none, so one model is one archive's bytes
    with (
        open(archive, "wb") as out,
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
    ):
        for path in sorted(folder.iterdir()):
            tar.add(path, arcname=path.name, filter=_plain)
    return archive


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Readable by any user (the storage initializer and vLLM run as non-root), and the same bytes for
    the same model."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    info.mode = 0o755 if info.isdir() else 0o644
    return info


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, TinyModel]:
    """Every kind's tiny model, made once per test session (skips, or fails where vLLM is required,
    without the vLLM venv)."""
    return make_tiny_models(tmp_path_factory.mktemp("tiny-models"))
