"""qkv.LLM.score / perplexity on the repository's tiny Llama-2 folder (SentencePiece, BOS): transformers'
per-token log-probabilities, top-2 and sliding-window perplexity (tests/fixtures/perplexity.json, made by
tests/reference/make_perplexity_fixtures.py), the same number as `qkv perplexity`, bad arguments."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

import qkv

LLAMA2 = FIXTURES / "arch" / "llama2"


@pytest.fixture(scope="module")
def llm() -> qkv.LLM:
    return qkv.LLM(LLAMA2)


@pytest.fixture(scope="module")
def ref() -> Any:
    return json.loads((FIXTURES / "perplexity.json").read_text())["models"]["llama2"]


def test_sliding_windows_match_transformers(llm: qkv.LLM, ref: Any) -> None:
    for w in ref["windows"]:
        s = llm.score(ref["text"], context=w["context"], stride=w["stride"])
        assert s.ids == ref["ids"]
        assert s.tokens == w["tokens"] == len(s.positions) == len(s.token_logprobs)
        assert s.context == w["context"] and s.stride == w["stride"]
        assert abs(s.perplexity - w["perplexity"]) / w["perplexity"] < 1e-5
        assert s.perplexity == pytest.approx(math.exp(-sum(s.token_logprobs) / s.tokens), rel=1e-12)
        assert s.top_logprobs == []
        if "positions" in w:
            assert s.positions == w["positions"]
            assert max(abs(a - b) for a, b in zip(s.token_logprobs, w["token_logprobs"])) < 1e-4
    # perplexity() is score()'s number; ids score as the text does.
    assert llm.perplexity(ref["text"], context=64, stride=24) == llm.score(ref["ids"], context=64, stride=24).perplexity


def test_prompt_logprobs_and_top2_match_transformers(llm: qkv.LLM, ref: Any) -> None:
    s = llm.score(ref["ids"][:40], context=40, stride=40, logprobs=2)
    assert s.windows == 1 and s.positions == list(range(1, 40))
    for i, (lp, top) in enumerate(zip(s.token_logprobs, s.top_logprobs)):
        assert abs(lp - ref["prompt"]["token_logprobs"][i]) < 1e-4
        assert [t for t, _ in top] == [t for t, _ in ref["prompt"]["top2"][i]]
        assert all(abs(a - b[1]) < 1e-4 for (_, a), b in zip(top, ref["prompt"]["top2"][i]))


def test_defaults_and_the_cli_give_the_same_number(llm: qkv.LLM, ref: Any, qkv_cli: Path, tmp_path: Path) -> None:
    s = llm.score(ref["text"])
    assert (s.context, s.stride) == (256, 128)  # the model's positions, half of them
    text = tmp_path / "text.txt"
    text.write_text(ref["text"])
    cmd = [str(qkv_cli), "--threads", str(qkv.get_num_threads()), "perplexity", "--model", str(LLAMA2), "--text",
           str(text), "--context", "64", "--stride", "24", "--json", "--no-progress"]
    cli = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    mine = llm.score(ref["text"], context=64, stride=24)
    assert cli["perplexity"] == pytest.approx(mine.perplexity, rel=1e-12)
    assert cli["tokens"] == mine.tokens and cli["windows"] == mine.windows


def test_bad_arguments_are_value_errors(llm: qkv.LLM, ref: Any) -> None:
    with pytest.raises(ValueError, match="gives 1 token"):
        llm.score("")  # BOS alone
    with pytest.raises(ValueError, match=r"stride must be in \[1, 8\]"):
        llm.score(ref["text"], context=8, stride=9)
    with pytest.raises(ValueError, match=r"context must be in \[2, 256\]"):
        llm.score(ref["text"], context=300)
    with pytest.raises(ValueError, match="stride must be >= 1"):
        llm.score(ref["text"], stride=0)
    with pytest.raises(ValueError, match=r"top must be in \[0, 20\]"):
        llm.score(ref["text"], logprobs=21)
    with pytest.raises(IndexError, match="token id 336"):
        llm.score([1, 336])
