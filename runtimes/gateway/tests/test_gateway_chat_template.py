"""Chat template parity: what the gateway sends tokenises exactly as apply_chat_template does."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEMPLATE = "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {{ eos_token }} {% endfor %}"


@pytest.fixture
def tokenizer_dir(tmp_path):
    """A word-level tokenizer whose post-processor adds BOS, like Llama's: the double-BOS trap."""
    words = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
    words += ["what", "is", "two", "plus", "four", "it"]
    model = tokenizers.models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>")
    raw = tokenizers.Tokenizer(model)
    raw.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    raw.post_processor = tokenizers.processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(tmp_path)
    return tmp_path


def _ids(encoded):
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def test_rendered_text_gives_apply_chat_template_tokens_with_one_bos(start_gateway, backend, tokenizer_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    gateway = start_gateway(
        chat_template_mode="gateway", chat_template_file=str(tokenizer_dir / "tokenizer_config.json")
    )
    answer = gateway.post("/v1/rewards", json={"items": [{"prompt": "what is two plus two", "response": "it is four"}]})
    assert answer.status_code == 200, answer.text
    _, sent = backend.calls[0]
    [text] = sent["input"]
    messages = [{"role": "user", "content": "what is two plus two"}, {"role": "assistant", "content": "it is four"}]
    expected = _ids(tokenizer.apply_chat_template(messages, tokenize=True))
    got = tokenizer(text, add_special_tokens=sent["add_special_tokens"])["input_ids"]
    assert got == expected
    assert got.count(tokenizer.bos_token_id) == 1
    # The same text with vLLM's default add_special_tokens=true would start with two BOS.
    assert tokenizer(text)["input_ids"][:2] == [tokenizer.bos_token_id] * 2


def test_trainer_text_gets_exactly_one_bos(start_gateway, backend, tokenizer_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    gateway = start_gateway(
        chat_template_mode="gateway", chat_template_file=str(tokenizer_dir / "tokenizer_config.json")
    )
    gateway.post("/get_reward", json={"query": ["<s><s><|user|> two", "<|user|> four"]})
    for _, sent in backend.calls:
        ids = tokenizer(sent["input"][0], add_special_tokens=sent["add_special_tokens"])["input_ids"]
        assert ids.count(tokenizer.bos_token_id) == 1
        assert ids[0] == tokenizer.bos_token_id
