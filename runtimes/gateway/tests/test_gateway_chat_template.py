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


def test_trainer_text_is_tokenised_as_openrlhf_serve_rm_does(start_gateway, backend, tokenizer_dir):
    """OpenRLHF's query holds its policy template's BOS already; its serve_rm.py tokenises it with
    add_special_tokens=False. The gateway sends it unchanged with the same setting, even where it
    knows the BOS: a Llama-family model with default settings sees exactly the query's one BOS."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    gateway = start_gateway(
        chat_template_mode="gateway", chat_template_file=str(tokenizer_dir / "tokenizer_config.json")
    )
    queries = ["<s><|user|> two", "<|user|> four"]
    gateway.post("/get_reward", json={"query": queries})
    for query, (_, sent) in zip(queries, backend.calls, strict=True):
        assert sent["input"] == [query] and sent["add_special_tokens"] is False
        ids = tokenizer(sent["input"][0], add_special_tokens=sent["add_special_tokens"])["input_ids"]
        assert ids == tokenizer(query, add_special_tokens=False)["input_ids"]  # serve_rm.py's ids
    assert [call[1]["input"][0].count("<s>") for call in backend.calls] == [1, 0]


def test_bos_the_template_writes_is_learnt_from_vllms_tokenizer(start_gateway, backend):
    """A chat template from the spec (no tokenizer config) that writes bos_token, with no BOS set:
    the gateway asks vLLM's /tokenize once and renders with the served tokenizer's BOS."""
    backend.bos_token = "<|begin_of_text|>"
    gateway = start_gateway(chat_template_mode="gateway", chat_template=TEMPLATE, eos_token="<|eot_id|>")
    item = {"prompt": "what is two plus two", "response": "it is four", "group": "g"}
    for _ in range(2):
        answer = gateway.post("/v1/rewards", json={"items": [item, item]})
        assert answer.status_code == 200, answer.text
    tokenize = [body for path, body in backend.calls if path == "/tokenize"]
    assert [body["add_special_tokens"] for body in tokenize] == [True, False], "learnt once"
    scored = [body for path, body in backend.calls if path != "/tokenize"]
    for body in scored:
        assert body["add_special_tokens"] is False
        assert all(
            text.startswith("<|begin_of_text|><|user|>") and text.count("<|begin_of_text|>") == 1
            for text in body["input"]
        )


def test_a_tokenizer_without_bos_renders_none(start_gateway, backend):
    backend.bos_token = None  # Qwen's tokenizers add no BOS
    gateway = start_gateway(chat_template_mode="gateway", chat_template=TEMPLATE, eos_token="<|im_end|>")
    answer = gateway.post("/v1/rewards", json={"items": [{"prompt": "what", "response": "four"}]})
    assert answer.status_code == 200, answer.text
    [text] = backend.calls[-1][1]["input"]
    assert text.startswith("<|user|> what")


# Shapes that real reward models' templates use (written for these tests): system
# defaults, `| trim`, raise_exception, namespace counters, attribute and item
# access, loop.first/last, tojson, macros, break/continue.
TEMPLATE_SHAPES = {
    "system-default-trim-raise": (
        "{{- bos_token }}"
        "{%- if messages[0]['role'] == 'system' %}"
        "{%- set system = messages[0]['content'] | trim %}{%- set rest = messages[1:] %}"
        "{%- else %}{%- set system = 'You judge answers.' %}{%- set rest = messages %}{%- endif %}\n"
        "<|start|>system<|sep|>{{ system }}<|end|>\n"
        "{%- for message in rest %}\n"
        "{%- if message['role'] not in ['user', 'assistant'] %}"
        "{{ raise_exception('only user and assistant turns follow the system turn') }}{%- endif %}\n"
        "<|start|>{{ message['role'] }}<|sep|>{{ message['content'] | trim }}<|end|>\n"
        "{%- endfor %}"
    ),
    "namespace-attributes-tojson": (
        "{%- set ns = namespace(turns=0) %}\n"
        "{%- for message in messages %}\n"
        "{%- if message.role == 'user' %}{%- set ns.turns = ns.turns + 1 %}{%- endif %}\n"
        "{%- if loop.first and message.role != 'system' %}<|im_start|>system\nDefault.<|im_end|>\n{% endif %}\n"
        "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>{% if not loop.last %}\n{% endif %}\n"
        "{%- endfor %}\n"
        '<!-- {{ ns.turns }} {{ {"n": messages | length, "first": messages[0].content} | tojson }} -->'
    ),
    "macro-loopcontrols": (
        "{% macro turn(role, text) %}[{{ role | upper }}] {{ text }}{{ eos_token }}{% endmacro %}\n"
        "{% for m in messages %}\n"
        "  {% if m.content == '' %}{% continue %}{% endif %}\n"
        "  {{ turn(m.role, m.content) }}\n"
        "  {% if loop.index >= 3 %}{% break %}{% endif %}\n"
        "{% endfor %}"
    ),
}
CONVERSATIONS = [
    [{"role": "user", "content": "  what is 2+2?  "}, {"role": "assistant", "content": "4\n"}],
    [
        {"role": "system", "content": "Be strict.\n"},
        {"role": "user", "content": 'say "hi" in Å-ish'},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "hi"},
    ],
]


@pytest.mark.parametrize("name", sorted(TEMPLATE_SHAPES))
def test_gateway_renders_real_world_template_shapes_as_transformers_does(tokenizer_dir, name):
    from reward_gateway.config.gateway import ChatTemplate
    from reward_gateway.scoring.chat_template import ChatTemplateRenderer

    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    source = TEMPLATE_SHAPES[name]
    renderer = ChatTemplateRenderer(ChatTemplate(source, tokenizer.bos_token, tokenizer.eos_token))
    for messages in CONVERSATIONS:
        expected = tokenizer.apply_chat_template(messages, chat_template=source, tokenize=False)
        assert renderer.render(messages) == expected


def test_a_template_that_refuses_a_conversation_is_a_bad_request(tokenizer_dir):
    from reward_gateway.config.gateway import ChatTemplate
    from reward_gateway.items.errors import BadRequest
    from reward_gateway.scoring.chat_template import ChatTemplateRenderer

    source = TEMPLATE_SHAPES["system-default-trim-raise"]
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "{}"}]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    with pytest.raises(Exception, match="only user and assistant"):
        tokenizer.apply_chat_template(messages, chat_template=source, tokenize=False)
    with pytest.raises(BadRequest, match="rejected these messages: only user and assistant"):
        ChatTemplateRenderer(ChatTemplate(source, "<s>", "</s>")).render(messages)
