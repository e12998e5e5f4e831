"""qkv.LLM on the repository's tiny GPT-2 folder: equal to `qkv generate` token for token, streaming,
stop strings, logprobs, chat, threads, Ctrl-C, bad arguments."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import FIXTURES

import qkv

TINY = FIXTURES / "gpt2_tiny"
PROMPT = "In the beginning"


@pytest.fixture(scope="module")
def llm() -> qkv.LLM:
    return qkv.LLM(TINY, chat_template="{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
                                       "{% if add_generation_prompt %}<assistant>{% endif %}")


def cli_generate(cli: Path, *args: str) -> list[dict[str, object]]:
    cmd = [str(cli), "--threads", str(qkv.get_num_threads()), "generate", "--model", str(TINY), "--json", *args]
    return [json.loads(line) for line in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()]


@pytest.mark.parametrize("options", [[], ["--temperature", "0.8", "--top-p", "0.9", "--top-k", "50", "--seed", "7"]])
def test_generate_equals_the_cli(llm: qkv.LLM, qkv_cli: Path, options: list[str]) -> None:
    cli = cli_generate(qkv_cli, "--prompt", PROMPT, "--max-new", "24", *options)[0]
    kw = dict(zip(["temperature", "top_p", "top_k", "seed"], [0.8, 0.9, 50, 7])) if options else {}
    g = llm.generate(PROMPT, max_new_tokens=24, details=True, **kw)  # type: ignore[arg-type]
    assert g.ids == cli["new_ids"]
    assert g.text == cli["text"]
    assert g.finish_reason == cli["stop_reason"]
    assert llm.generate(PROMPT, max_new_tokens=24, **kw) == cli["text"]  # type: ignore[arg-type]


def test_penalties_bias_and_min_p_equal_the_cli(llm: qkv.LLM, qkv_cli: Path) -> None:
    greedy = llm.generate(PROMPT, max_new_tokens=12, details=True)
    banned = greedy.ids[0]
    kw = dict(repeat_penalty=1.6, repeat_last_n=8, frequency_penalty=0.7, presence_penalty=0.3,
              logit_bias={banned: -100.0, 5: 1.5})
    cli = cli_generate(qkv_cli, "--prompt", PROMPT, "--max-new", "12", "--repeat-penalty", "1.6", "--repeat-last-n", "8",
                       "--frequency-penalty", "0.7", "--presence-penalty", "0.3", "--logit-bias", f"{banned}=-100",
                       "--logit-bias", "5=1.5")[0]
    g = llm.generate(PROMPT, max_new_tokens=12, details=True, **kw)  # type: ignore[arg-type]
    assert g.ids == cli["new_ids"]
    assert banned not in g.ids
    assert g.ids != greedy.ids
    sampled = llm.generate(PROMPT, max_new_tokens=12, temperature=0.9, seed=3, min_p=0.2, details=True)
    cli_sampled = cli_generate(qkv_cli, "--prompt", PROMPT, "--max-new", "12", "--temperature", "0.9", "--seed", "3",
                               "--min-p", "0.2")[0]
    assert sampled.ids == cli_sampled["new_ids"]
    assert "".join(llm.stream(PROMPT, max_new_tokens=12, **kw)) == g.text  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeat_penalty must be a finite number > 0"):
        llm.generate(PROMPT, repeat_penalty=0)
    with pytest.raises(IndexError, match="logit_bias names token"):
        llm.generate(PROMPT, logit_bias={10**9: 1.0})


def test_batches_stop_strings_and_ids_equal_the_cli(llm: qkv.LLM, qkv_cli: Path, tmp_path: Path) -> None:
    prompts = ["In the beginning", "And God said", "the"]
    (tmp_path / "p.txt").write_text("\n".join(prompts) + "\n")
    cli = cli_generate(qkv_cli, "--prompts-file", str(tmp_path / "p.txt"), "--max-new", "30", "--stop", "LORD")
    gens = llm.generate(prompts, max_new_tokens=30, stop="LORD", details=True)
    assert [g.ids for g in gens] == [c["new_ids"] for c in cli]
    assert [g.text for g in gens] == [c["text"] for c in cli]
    assert [g.finish_reason for g in gens] == [c["stop_reason"] for c in cli]
    ids = llm.tokenize(PROMPT)
    assert llm.generate(ids, max_new_tokens=10) == cli_generate(qkv_cli, "--prompt-ids", ",".join(map(str, ids)),
                                                                 "--max-new", "10")[0]["new_ids"]


def test_stream_tokenize_logprobs_chat(llm: qkv.LLM) -> None:
    text = llm.generate(PROMPT, max_new_tokens=20)
    assert "".join(llm.stream(PROMPT, max_new_tokens=20)) == text
    it = llm.stream(PROMPT, max_new_tokens=20)
    first = next(it)
    it.close()  # stops the generation early
    assert text.startswith(first)
    ids = llm.tokenize("And God said, Let there be light")
    assert llm.detokenize(ids) == "And God said, Let there be light"
    g = llm.generate(PROMPT, max_new_tokens=8, logprobs=3, details=True)
    assert [lp[0] for lp in g.logprobs] == g.ids
    for tok, lp, top in g.logprobs:
        assert len(top) == 3 and top[0][0] == tok and lp == top[0][1] <= 0  # greedy: the most likely
    reply = llm.chat([{"role": "user", "content": "Hello"}], max_new_tokens=8, details=True)
    assert reply.ids == llm.generate("<user>Hello\n<assistant>", max_new_tokens=8, details=True).ids


def test_bad_arguments(llm: qkv.LLM, tmp_path: Path) -> None:
    with pytest.raises(IndexError, match="token id 5000 at position 1, out of range \\[0, 1000\\)"):
        llm.generate([1, 5000])
    with pytest.raises(ValueError, match="temperature"):
        llm.generate(PROMPT, temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        llm.generate(PROMPT, top_p=0.0)
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        llm.generate(PROMPT, top_k=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        llm.generate(PROMPT, max_new_tokens=0)
    with pytest.raises(ValueError, match="empty stop string"):
        llm.generate(PROMPT, stop="")
    with pytest.raises(ValueError, match="messages: element 0"):
        llm.chat(["hi"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="messages: element 0 has no \"content\""):
        llm.chat([{"role": "user"}])
    with pytest.raises(ValueError, match="has no chat template: pass chat_template="):
        qkv.LLM(TINY).chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="chat_template is empty"):
        qkv.LLM(TINY, chat_template="")
    with pytest.raises(ValueError, match="chat template"):
        qkv.LLM(TINY, chat_template="{% for %}")
    with pytest.raises(OSError, match="does not exist"):
        qkv.LLM(tmp_path / "nothing-here")
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ValueError, match="is a BERT folder; generation needs a causal language model"):
        qkv.LLM(tmp_path / "bert")
    (tmp_path / "x.gguf").write_text("not a gguf")
    with pytest.raises(ValueError, match="not a GGUF file"):
        qkv.LLM(tmp_path / "x.gguf")


def test_threads_share_one_model(llm: qkv.LLM) -> None:
    prompts = ["In the beginning", "And God said", "the", "And the LORD"] * 2
    alone = [llm.generate(p, max_new_tokens=16, temperature=0.7, seed=i) for i, p in enumerate(prompts)]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda a: llm.generate(a[1], max_new_tokens=16, temperature=0.7, seed=a[0]),
                                 enumerate(prompts)))
    assert together == alone


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_interrupts_a_generation(llm: qkv.LLM) -> None:
    timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            deadline = time.monotonic() + 60  # a lost interrupt fails the test, not hangs it
            while time.monotonic() < deadline:
                llm.generate([PROMPT] * 16, max_new_tokens=48)
    finally:
        timer.cancel()
    # raised inside a generate call (its token callback), not between two calls
    assert "_run" in [entry.name for entry in e.traceback]
    assert llm.generate(PROMPT, max_new_tokens=4)  # still usable
