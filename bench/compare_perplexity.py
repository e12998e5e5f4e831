#!/usr/bin/env python3
"""Perplexity of one GGUF model on one text by qkv, Hugging Face transformers and llama.cpp, on the
same tokens (BENCHMARKS.md, "Perplexity").

Three sets of scored tokens, each with the same context in every engine (T tokens, context N,
stride S):
  hf-rule       transformers' sliding-window rule, `qkv perplexity`'s: windows of N tokens every S
                from 0, each scoring the tokens the previous one did not; every token but the first.
  ppl-stride    what llama-perplexity --ppl-stride S scores: the last S tokens of each full window of
                N tokens starting at 0, S, 2S, ... (the same windows as the rule after its first, so
                the same context; the first window's first N - S tokens and the tail after the last
                full window are left out). llama-perplexity widens its context by S/2 when given a
                stride, so it runs with -c N - S/2 (and -b the same) to get windows of N.
  llama-chunks  llama-perplexity's default: non-overlapping chunks of N tokens, each scoring its tokens
                N/2 + 1 .. N - 1 from a fresh context (-c N).

Engines:
  qkv           `qkv perplexity --json` (hf-rule), and per token through the Python package
                (LLM.score, run by --qkv-python: an interpreter where `import qkv` works) for the other
                sets; with its exact arithmetic (float32 activations and KV cache, the default) and with
                llama.cpp's (--activations q8: activations quantized per 32 values for the quantized
                products; --kv-cache f16).
  transformers  AutoModelForCausalLM.from_pretrained(dir, gguf_file=...): the GGUF dequantized to
                float32, fed qkv's token ids (`qkv tokenize --add-special`); log_softmax in float64.
  llama.cpp     llama-perplexity on the text (its own tokenizer; its token count is checked).

Run from the repository root with the venv that has torch, transformers and gguf:

  head -c 32768 data/kjv.txt > /tmp/kjv32k.txt
  /root/qkv-venv/bin/python bench/compare_perplexity.py --qkv build/tools/qkv/qkv --qkv-python build-venv/bin/python \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --text /tmp/kjv32k.txt --context 512 --stride 256 \\
      --llama-perplexity /root/peers/llama.cpp-build/bin/llama-perplexity --threads 2
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time


def run(cmd: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, input=stdin)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r


def ppl(values: list[float]) -> float:
    return math.exp(-sum(values) / len(values))


def stride_positions(T: int, N: int, S: int) -> range:
    """The positions llama-perplexity --ppl-stride scores with windows of N."""
    n_chunk = (T - N + S - 1) // S
    return range(N - S, (n_chunk - 1) * S + N)


def summarise(lp: dict[int, float], chunks: list[float], T: int, N: int, S: int) -> dict[str, object]:
    sp = [lp[t] for t in stride_positions(T, N, S)]
    return {"hf-rule": ppl(list(lp.values())), "hf-rule scored": len(lp), "ppl-stride": ppl(sp),
            "ppl-stride scored": len(sp), "llama-chunks": ppl(chunks), "llama-chunks scored": len(chunks)}


def qkv_worker(args: argparse.Namespace) -> None:
    """Runs under --qkv-python: the three sets through qkv.LLM.score."""
    import qkv
    ids = json.loads(sys.stdin.read())
    T, N, S = len(ids), args.context, args.stride
    llm = qkv.LLM(args.model, threads=args.threads, activations=args.activations, kv_cache=args.kv_cache)
    t0 = time.time()
    s = llm.score(ids, context=N, stride=S)
    seconds = time.time() - t0
    chunks: list[float] = []
    for c in range(T // N):
        r = llm.score(ids[c * N:(c + 1) * N], context=N, stride=N)
        chunks += [l for p, l in zip(r.positions, r.token_logprobs) if p >= N // 2 + 1]
    out = summarise(dict(zip(s.positions, s.token_logprobs)), chunks, T, N, S)
    out["seconds"] = seconds
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--qkv-python", default="")
    ap.add_argument("--model", required=True, help="a GGUF file")
    ap.add_argument("--text", required=True)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--stride", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--llama-perplexity", default="")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--activations", default="f32", help=argparse.SUPPRESS)
    ap.add_argument("--kv-cache", default="f32", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return qkv_worker(args)
    N, S, threads = args.context, args.stride, args.threads
    text = open(args.text, encoding="utf-8").read()
    out: dict[str, object] = {"model": os.path.basename(args.model), "text": args.text, "text_bytes": len(text.encode()),
                              "context": N, "stride": S, "threads": threads}

    # qkv: its tokens and its perplexity (the CLI), then the three sets (the Python package).
    ids = json.loads(run([args.qkv, "tokenize", "--model", args.model, "--add-special", "--json", text]).stdout)["ids"]
    T = len(ids)
    out["tokens"] = T
    for label, flags in (("qkv", []), ("qkv --activations q8 --kv-cache f16", ["--activations", "q8", "--kv-cache", "f16"])):
        q = json.loads(run([args.qkv, "--threads", str(threads), "perplexity", "--model", args.model, "--text", args.text,
                            "--context", str(N), "--stride", str(S), "--json", "--no-progress", *flags]).stdout)
        assert q["text_tokens"] == T, (q["text_tokens"], T)
        entry: dict[str, object] = {"cli hf-rule": q["perplexity"], "cli scored": q["tokens"], "cli seconds": q["seconds"]}
        if args.qkv_python:
            w = run([args.qkv_python, os.path.abspath(__file__), "--worker", "--model", args.model,
                     "--context", str(N), "--stride", str(S), "--threads", str(threads),
                     "--activations", "q8" if flags else "f32", "--kv-cache", "f16" if flags else "f32",
                     "--qkv", args.qkv, "--text", args.text], stdin=json.dumps(ids))
            entry.update(json.loads(w.stdout))
        out[label] = entry

    # transformers on the same ids, the same windows.
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(args.model)),
                                                 gguf_file=os.path.basename(args.model), dtype=torch.float32).eval()
    x = torch.tensor([ids])

    def window_logprobs(begin: int, end: int) -> torch.Tensor:
        with torch.no_grad():
            logits = model(x[:, begin:end]).logits[0].float()
        return torch.log_softmax(logits.double(), dim=-1)

    lp: dict[int, float] = {}
    t0 = time.time()
    prev_end = 0
    for begin in range(0, T, S):
        end = min(begin + N, T)
        first = max(prev_end, begin + 1)
        if first < end:
            w = window_logprobs(begin, end)
            for t in range(first, end):
                lp[t] = w[t - begin - 1, ids[t]].item()
        prev_end = end
        if end == T:
            break
    seconds = time.time() - t0
    chunks: list[float] = []
    for c in range(T // N):
        w = window_logprobs(c * N, (c + 1) * N)
        chunks += [w[j, ids[c * N + j + 1]].item() for j in range(N // 2, N - 1)]
    out["transformers"] = {**summarise(lp, chunks, T, N, S), "seconds": seconds}

    # llama.cpp on the text: --ppl-stride with windows of N (-c N - S/2), and its default with -c N.
    if args.llama_perplexity:
        base = [args.llama_perplexity, "-m", args.model, "-f", args.text, "-t", str(threads)]
        t0 = time.time()
        # (-b too: llama-perplexity packs n_batch / n_ctx sequences into one context otherwise.)
        r = run(base + ["-c", str(N - S // 2), "-b", str(N - S // 2), "--ppl-stride", str(S)])
        log = r.stdout + r.stderr
        have = re.search(r"have (\d+) tokens", log)
        vals = re.findall(r"\[(\d+)\]([0-9.]+),", log)
        if not have or int(have.group(1)) != T or not vals or int(vals[-1][0]) != (T - N + S - 1) // S:
            sys.exit(f"llama-perplexity --ppl-stride: unexpected output (tokens {T}):\n{log[-3000:]}")
        out["llama-perplexity"] = {"ppl-stride": float(vals[-1][1]), "ppl-stride windows": int(vals[-1][0]),
                                   "ppl-stride wall seconds": time.time() - t0}
        t0 = time.time()
        r = run(base + ["-c", str(N), "-b", str(N)])
        log = r.stdout + r.stderr
        final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
        if not final:
            sys.exit(f"llama-perplexity: no final estimate:\n{log[-3000:]}")
        out["llama-perplexity"].update({"llama-chunks": float(final.group(1)), "llama-chunks uncertainty": float(final.group(2)),
                                        "llama-chunks wall seconds": time.time() - t0})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
