"""qkv.LLM(draft=...): speculative decoding by prompt lookup or a draft model gives the tokens plain
decoding gives and the counts `qkv generate --draft` reports; bad drafts are refused at construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, cli_generate

import qkv

TINY_LLAMA = FIXTURES / "llama_family" / "llama"
REWRITE = [{"role": "user", "content": "Rewrite in the past tense, changing nothing else: The keeper climbs the stairs "
                                       "every evening. He lights the lamp and watches the ships pass the point."}]



def test_prompt_lookup_keeps_the_tokens_and_counts_as_the_cli(smollm_gguf: Path, qkv_cli: Path, tmp_path: Path) -> None:
    plain = qkv.LLM(smollm_gguf).chat(REWRITE, max_new_tokens=40, details=True)
    assert plain.speculative == {}
    spec = qkv.LLM(smollm_gguf, draft="ngram").chat(REWRITE, max_new_tokens=40, details=True)
    assert spec.ids == plain.ids
    assert spec.text == plain.text
    assert 0 < spec.speculative["accepted"] <= spec.speculative["drafted"]
    assert spec.speculative["tokens_per_pass"] > 1
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(REWRITE))
    cli = cli_generate(qkv_cli, smollm_gguf, "--messages", str(messages), "--max-new", "40", "--draft", "ngram")
    assert cli["new_ids"] == spec.ids
    counts = cli["speculative"]
    assert isinstance(counts, dict)
    assert counts["drafted"] == spec.speculative["drafted"]
    assert counts["accepted"] == spec.speculative["accepted"]


def test_draft_models_by_path_and_by_llm(smollm_gguf: Path) -> None:
    # The model as its own draft, both with Q8 activations (a draft loaded by path has them): every guess is kept.
    target = qkv.LLM(smollm_gguf, activations="q8")
    plain = target.generate("The three primary colours are", max_new_tokens=24, details=True)
    spec = qkv.LLM(smollm_gguf, activations="q8", draft=smollm_gguf, draft_max=2)
    assert spec.draft is not None
    got = spec.generate("The three primary colours are", max_new_tokens=24, details=True)
    assert got.ids == plain.ids
    assert got.speculative["drafted"] > 0
    assert got.speculative["acceptance"] == 1.0
    # An LLM object as the draft; ids prompts on a model without a tokenizer.
    tiny = qkv.LLM(TINY_LLAMA)
    ids = [1, 5, 9, 1, 5, 9, 1, 5]
    want = tiny.generate(ids, max_new_tokens=30, ignore_eos=True)
    assert qkv.LLM(TINY_LLAMA, draft=tiny).generate(ids, max_new_tokens=30, ignore_eos=True) == want
    assert qkv.LLM(TINY_LLAMA, draft="ngram", draft_ngram=2).generate(ids, max_new_tokens=30, ignore_eos=True) == want


def test_bad_drafts_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="must be in \\[1, 32\\], got 0"):
        qkv.LLM(TINY_LLAMA, draft="ngram", draft_max=0)
    with pytest.raises(ValueError, match="draft_ngram must be in \\[1, 16\\], got 17"):
        qkv.LLM(TINY_LLAMA, draft="ngram", draft_ngram=17)
    with pytest.raises(ValueError, match="need draft='ngram' or a draft model"):
        qkv.LLM(TINY_LLAMA, draft_max=4)
    with pytest.raises(ValueError, match="goes with draft='ngram'"):
        qkv.LLM(TINY_LLAMA, draft=TINY_LLAMA, draft_ngram=2)
    with pytest.raises(ValueError, match="vocabulary has 336 tokens, the target's 128"):
        qkv.LLM(TINY_LLAMA, draft=FIXTURES / "arch" / "gemma2")
    with pytest.raises(ValueError, match="does not share the vocabulary"):
        qkv.LLM(FIXTURES / "arch" / "phi3", draft=FIXTURES / "arch" / "smollm3")
