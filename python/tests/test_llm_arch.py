"""qkv.LLM on every architecture of the registry beyond the Llama family (tests/fixtures/arch: tiny
models trained by transformers, their folders and the GGUF files llama.cpp's converter wrote;
tests/reference/make_arch_fixtures.py): the prompt's ids and greedy tokens equal transformers',
chat prompts rendered with chat_template_kwargs as transformers renders them, and
qkv.supported_models() lists each architecture from the registry."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

import qkv

ARCH = FIXTURES / "arch"
REFERENCE = json.loads((ARCH / "reference.json").read_text(encoding="utf-8"))
NAMES = sorted(k for k in REFERENCE if not k.startswith("_") and not k.endswith("_gguf"))
CHAT = [{"role": "user", "content": "Who divided the light from the darkness?"}]
NEW = 16


def path_of(variant: str) -> str:
    return str(ARCH / (variant[: -len("_gguf")] + ".gguf" if variant.endswith("_gguf") else variant))


@pytest.mark.parametrize("variant", [v for n in NAMES for v in (n, n + "_gguf")])
def test_generate_and_chat_give_transformers_tokens(variant: str) -> None:
    ref = REFERENCE[variant]
    llm = qkv.LLM(path_of(variant))
    assert llm.architecture == ("llama" if variant.startswith("llama2") else variant.split("_")[0])
    assert llm.tokenize(ref["texts"][0]) == ref["prompts"][0]
    g = llm.generate(ref["texts"][0], max_new_tokens=NEW, ignore_eos=True, details=True)
    assert g.ids == ref["generated"][0][:NEW]
    # A batch of mixed lengths: each prompt's tokens are those it gets alone.
    batch = llm.generate([ref["prompts"][1], ref["prompts"][0]], max_new_tokens=NEW, ignore_eos=True, details=True)
    assert batch[0].ids == ref["generated"][1][:NEW]
    assert batch[1].ids == ref["generated"][0][:NEW]
    # The chat prompt with the template variables the references were rendered with (the
    # other families' templates ignore enable_thinking).
    kwargs = {"enable_thinking": False}
    assert llm.render_chat(CHAT, chat_template_kwargs=kwargs) == ref["texts"][2]
    if variant != "llama2_gguf":  # llama.cpp's SentencePiece puts a space after <s> (tests/cli/test_cli_arch.cpp)
        reply = llm.chat(CHAT, max_new_tokens=NEW, chat_template_kwargs=kwargs, details=True)
        want = ref["generated"][2][:NEW]
        eos = set(llm.eos_token_ids)
        cut = next((i + 1 for i, t in enumerate(want) if t in eos), len(want))
        assert reply.ids == want[:cut]


def test_qwen3_template_variables_change_the_prompt() -> None:
    llm = qkv.LLM(path_of("qwen3"))
    thinking = llm.render_chat(CHAT)
    plain = llm.render_chat(CHAT, chat_template_kwargs={"enable_thinking": False})
    assert plain == thinking + "<think>\n\n</think>\n\n"
    with pytest.raises(ValueError, match="chat_template_kwargs"):
        llm.render_chat(CHAT, chat_template_kwargs={"messages": []})


def test_a_reasoning_reply_is_its_answer_and_its_reasoning_apart() -> None:
    # The tiny Qwen3 (<think> and </think> in its vocabulary) under a template that leaves <think>
    # open: its reply is reasoning until a </think>; with enable_thinking false (closed in the
    # prompt) all of it is the answer. The parts are the token ids' text either side of </think>.
    open_think = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")
    llm = qkv.LLM(path_of("qwen3"), chat_template=open_think)
    g = llm.chat(CHAT, max_new_tokens=12, ignore_eos=True, details=True)
    close = llm.tokenize("</think>")[0]
    cut = g.ids.index(close) if close in g.ids else len(g.ids)
    assert g.reasoning == llm.detokenize(g.ids[:cut]) and g.reasoning
    assert g.text == llm.detokenize(g.ids[cut + 1:]).lstrip()
    assert "".join(llm.stream_chat(CHAT, max_new_tokens=12, ignore_eos=True)) == g.text
    plain = qkv.LLM(path_of("qwen3")).chat(CHAT, max_new_tokens=12, ignore_eos=True, details=True,
                                             chat_template_kwargs={"enable_thinking": False})
    assert plain.reasoning == "" and plain.text == llm.detokenize(plain.ids).lstrip()
    # A completion is the raw text.
    assert qkv.LLM(path_of("qwen3")).generate("<think>", max_new_tokens=4, ignore_eos=True, details=True).reasoning == ""


def test_supported_models_come_from_the_registry() -> None:
    families = {f["name"]: f for f in qkv.supported_models()}
    for name in ("gemma2", "gemma3", "gpt2", "llama", "phi3", "qwen2", "qwen3", "smollm3"):
        assert families[name]["role"] == "causal-lm", name
    assert families["bert"]["role"] == "encoder"
    assert "gemma3_text" in families["gemma3"]["model_types"]
    assert "mistral" in families and "qwen3" in families["qwen3"]["gguf_architectures"]
    names = [f["name"] for f in qkv.supported_models()]
    assert names == sorted(names)


MOE = FIXTURES / "moe"
MOE_REFERENCE = json.loads((MOE / "reference.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["mixtral", "qwen3_moe", "olmoe", "qwen2_moe", "gpt_oss"])
def test_mixtures_of_experts_give_transformers_tokens(name: str) -> None:
    # The GGUF files llama.cpp's converter wrote (the folders carry no tokenizer): Mixtral's says llama.
    ref = MOE_REFERENCE[name + "_gguf"]
    llm = qkv.LLM(str(MOE / (name + ".gguf")))
    assert llm.architecture == ("llama" if name == "mixtral" else name)
    assert llm.tokenize(ref["texts"][0]) == ref["prompts"][0]
    g = llm.generate(ref["texts"][0], max_new_tokens=NEW, ignore_eos=True, details=True)
    assert g.ids == ref["generated"][0][:NEW]
    batch = llm.generate([ref["prompts"][1], ref["prompts"][0]], max_new_tokens=NEW, ignore_eos=True, details=True)
    assert batch[0].ids == ref["generated"][1][:NEW]
    assert batch[1].ids == ref["generated"][0][:NEW]


HYBRID = FIXTURES / "hybrid"
HYBRID_REFERENCE = json.loads((HYBRID / "reference.json").read_text(encoding="utf-8"))


def test_qwen3_5_linear_attention_gives_transformers_tokens() -> None:
    # Qwen3.5's Gated DeltaNet layers keep a recurrent state per sequence: plain, batched with a
    # shorter prompt, and with prompt-lookup drafts (rejections send the states back to a checkpoint).
    ref = HYBRID_REFERENCE["qwen3_5_gguf"]
    llm = qkv.LLM(str(HYBRID / "qwen3_5.gguf"))
    assert llm.architecture == "qwen3_5"
    assert llm.tokenize(ref["texts"][1]) == ref["prompts"][1]
    g = llm.generate(ref["texts"][1], max_new_tokens=NEW, ignore_eos=True, details=True)
    assert g.ids == ref["generated"][1][:NEW]
    batch = llm.generate([ref["prompts"][1], ref["prompts"][0]], max_new_tokens=NEW, ignore_eos=True, details=True)
    assert batch[0].ids == ref["generated"][1][:NEW]
    assert batch[1].ids == ref["generated"][0][:NEW]
    d = qkv.LLM(str(HYBRID / "qwen3_5.gguf"), draft="ngram").generate(ref["texts"][1], max_new_tokens=NEW,
                                                                       ignore_eos=True, details=True)
    assert d.ids == g.ids
