"""qkv.LLM on the Llama family: SmolLM2-135M-Instruct as a Q4_1 GGUF file (`make models`; its
tokenizer, chat template and end-of-sequence tokens come from the file) and the repository's tiny
random Llama folder (no tokenizer: token ids only), each equal to `qkv generate` token for token."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES, cli_generate

import qkv

QUESTION = "What is the capital of France?"
TINY_LLAMA = FIXTURES / "llama_family" / "llama"



@pytest.fixture(scope="module")
def smollm(smollm_gguf: Path) -> qkv.LLM:
    return qkv.LLM(smollm_gguf)


def test_gguf_chat_equals_the_cli(smollm: qkv.LLM, smollm_gguf: Path, qkv_cli: Path) -> None:
    cli = cli_generate(qkv_cli, smollm_gguf, "--chat", QUESTION, "--max-new", "64")
    messages = [{"role": "user", "content": QUESTION}]
    reply = smollm.chat(messages, max_new_tokens=64, details=True)
    assert reply.ids == cli["new_ids"]
    assert reply.text == cli["text"]
    assert "Paris" in reply.text
    # It ended at an end-of-sequence token of the file, kept in the ids, not in the text.
    assert reply.finish_reason == cli["stop_reason"] == "eos"
    assert reply.ids[-1] in smollm.eos_token_ids
    assert smollm.detokenize(reply.ids[-1:]) not in reply.text
    assert smollm.chat(messages, max_new_tokens=64) == reply.text
    # The prompt: the file's own template, then its tokens as the CLI's.
    rendered = smollm.render_chat(messages)
    assert rendered == cli["prompt"] and rendered.startswith("<|im_start|>system\n")
    assert smollm.tokenize(rendered, add_bos=False) == cli["prompt_ids"]
    # Streamed, the pieces join to the same reply.
    pieces = list(smollm.stream_chat(messages, max_new_tokens=64))
    assert len(pieces) > 1 and "".join(pieces) == reply.text


def test_gguf_generate_stream_and_tokenize_equal_the_cli(smollm: qkv.LLM, smollm_gguf: Path, qkv_cli: Path) -> None:
    prompt = "The capital of France is"
    cli = cli_generate(qkv_cli, smollm_gguf, "--prompt", prompt, "--max-new", "12")
    assert smollm.tokenize(prompt) == cli["prompt_ids"]
    g = smollm.generate(prompt, max_new_tokens=12, details=True)
    assert g.ids == cli["new_ids"] and g.text == cli["text"]
    assert "".join(smollm.stream(prompt, max_new_tokens=12)) == g.text
    assert smollm.generate(smollm.tokenize(prompt), max_new_tokens=12) == g.ids
    assert smollm.detokenize(smollm.tokenize(prompt, add_bos=False)) == prompt
    assert smollm.architecture == "llama" and smollm.vocab_size == 49152


def test_gguf_ignore_eos_and_q8_activations_equal_the_cli(smollm: qkv.LLM, smollm_gguf: Path, qkv_cli: Path) -> None:
    messages = [{"role": "user", "content": QUESTION}]
    # ignore_eos: the reply runs past the end-of-sequence token to max_new_tokens, as --ignore-eos.
    cli = cli_generate(qkv_cli, smollm_gguf, "--chat", QUESTION, "--max-new", "40", "--ignore-eos")
    g = smollm.chat(messages, max_new_tokens=40, ignore_eos=True, details=True)
    assert g.ids == cli["new_ids"] and g.text == cli["text"]
    assert g.finish_reason == cli["stop_reason"] == "length" and len(g.ids) == 40
    assert any(i in smollm.eos_token_ids for i in g.ids)  # an eos token it went past (shown as text)
    assert "".join(smollm.stream_chat(messages, max_new_tokens=40, ignore_eos=True)) == g.text
    # activations="q8": the prompt's quantized products take 8-bit activations, as --activations q8.
    q8 = qkv.LLM(smollm_gguf, activations="q8")
    cli = cli_generate(qkv_cli, smollm_gguf, "--chat", QUESTION, "--max-new", "24", "--activations", "q8")
    g = q8.chat(messages, max_new_tokens=24, details=True)
    assert g.ids == cli["new_ids"] and g.text == cli["text"]
    with pytest.raises(ValueError, match="activations must be 'f32' or 'q8', got 'int4'"):
        qkv.LLM(smollm_gguf, activations="int4")


def test_gguf_half_precision_kv_cache_equals_the_cli(smollm_gguf: Path, qkv_cli: Path) -> None:
    # kv_cache="f16": keys and values kept as IEEE halves, as --kv-cache f16.
    f16 = qkv.LLM(smollm_gguf, kv_cache="f16")
    cli = cli_generate(qkv_cli, smollm_gguf, "--chat", QUESTION, "--max-new", "24", "--kv-cache", "f16")
    g = f16.chat([{"role": "user", "content": QUESTION}], max_new_tokens=24, details=True)
    assert g.ids == cli["new_ids"] and g.text == cli["text"]
    with pytest.raises(ValueError, match="kv_cache must be f32 or f16, got 'bf16'"):
        qkv.LLM(smollm_gguf, kv_cache="bf16")


def test_gguf_chat_template_argument_replaces_the_files(smollm_gguf: Path) -> None:
    llm = qkv.LLM(smollm_gguf, chat_template="{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                                             "{% if add_generation_prompt %}assistant:{% endif %}")
    assert llm.render_chat([{"role": "user", "content": "Hi"}]) == "user: Hi\nassistant:"


def test_tiny_llama_folder_equals_the_cli(qkv_cli: Path) -> None:
    llm = qkv.LLM(TINY_LLAMA)
    assert llm.architecture == "llama"
    ids = [5, 9, 17, 33, 2, 80, 101]
    for options, kw in [([], {}), (["--temperature", "0.9", "--top-k", "20", "--seed", "3"],
                                   {"temperature": 0.9, "top_k": 20, "seed": 3})]:
        cli = cli_generate(qkv_cli, TINY_LLAMA, "--prompt-ids", ",".join(map(str, ids)), "--max-new", "16", *options)
        g = llm.generate(ids, max_new_tokens=16, details=True, **kw)  # type: ignore[arg-type]
        assert cli["prompt_ids"] == ids
        assert g.ids == cli["new_ids"]
        assert g.finish_reason == cli["stop_reason"]
    with pytest.raises(ValueError, match="has no tokenizer"):
        llm.tokenize("hello")
    with pytest.raises(ValueError, match="has no tokenizer"):
        llm.generate("hello")
    with pytest.raises(IndexError, match="out of range"):
        llm.generate([1, llm.vocab_size])
