"""qkv from Python, measured: the call overhead of the binding, attention beside PyTorch, sentence
embeddings beside sentence-transformers, generation beside `qkv generate`.

    # qkv importable (pip install . into a venv that also has torch and sentence-transformers),
    # or PYTHONPATH=build/python after a CMake build with -DQKV_BUILD_PYTHON=ON:
    flock /tmp/qkv-cpu.lock python bench/bench_python.py overhead
    flock /tmp/qkv-cpu.lock python bench/bench_python.py torch      --threads 1 2
    flock /tmp/qkv-cpu.lock python bench/bench_python.py embed      --model models/all-MiniLM-L6-v2
    flock /tmp/qkv-cpu.lock python bench/bench_python.py generate   --model models/SmolLM2-135M-Instruct.Q4_1.gguf --cli build/tools/qkv/qkv

Every comparison interleaves the two sides round by round (so a machine that slows down slows
both) and reports medians. Nothing here is a test: numbers go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import qkv


def median_us(xs: list[float]) -> float:
    return statistics.median(xs) * 1e6


def time_calls(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def bench_overhead(args: argparse.Namespace) -> dict[str, Any]:
    """qkv.scaled_dot_product_attention from Python vs the same library call in a C++ loop, same process and arrays."""
    rows = {}
    for shape in ([1, 8, 128, 64], [1, 1, 1, 8]):
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        py: list[float] = []
        cpp: list[float] = []
        fn = lambda: qkv.scaled_dot_product_attention(q, k, v)  # noqa: E731
        time_calls(fn, 100)
        qkv._qkv._bench_sdpa(q, k, v, 100)
        for _ in range(args.rounds):
            cpp += qkv._qkv._bench_sdpa(q, k, v, args.calls)
            py += time_calls(fn, args.calls)
        rows["x".join(map(str, shape))] = {
            "python_us": median_us(py), "cpp_us": median_us(cpp), "overhead_us": median_us(py) - median_us(cpp),
        }
    return {"threads": qkv.get_num_threads(), "isa": qkv.get_isa(), "calls": args.rounds * args.calls, "shapes": rows}


def bench_torch(args: argparse.Namespace) -> dict[str, Any]:
    """qkv vs torch.nn.functional.scaled_dot_product_attention on (4, 8, 2048, 64) float32, same threads."""
    import torch

    F = torch.nn.functional
    shape = (4, 8, 2048, 64)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=g) for _ in range(3))
    out = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        qkv.set_num_threads(threads)
        for causal in (False, True):
            tq = lambda: qkv.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            tt = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            np.testing.assert_allclose(tq().numpy(), tt().numpy(), atol=1e-4)
            a: list[float] = []
            b: list[float] = []
            for _ in range(args.rounds):
                a += time_calls(tq, 1)
                b += time_calls(tt, 1)
            key = f"threads={threads} {'causal' if causal else 'no mask'}"
            out[key] = {"qkv_ms": median_us(a) / 1e3, "torch_ms": median_us(b) / 1e3,
                        "speedup": statistics.median(b) / statistics.median(a)}
    return {"shape": shape, "torch": torch.__version__, "rounds": args.rounds, "results": out}


def corpus(args: argparse.Namespace) -> list[str]:
    lines = [x for x in Path(args.corpus).read_text(encoding="utf-8").splitlines() if x.strip()]
    return lines[: args.sentences]


def bench_embed(args: argparse.Namespace) -> dict[str, Any]:
    """qkv.Embedder.encode vs SentenceTransformer.encode, batch 32, one thread, same sentences."""
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads[0])
    qkv.set_num_threads(args.threads[0])
    texts = corpus(args)
    st = SentenceTransformer(args.model, device="cpu")
    ours = qkv.Embedder(args.model)
    np.testing.assert_allclose(ours.encode(texts[:64]), st.encode(texts[:64], normalize_embeddings=True), atol=1e-5)
    a: list[float] = []
    b: list[float] = []
    for _ in range(args.rounds):
        a += time_calls(lambda: ours.encode(texts, batch_size=32), 1)
        b += time_calls(lambda: st.encode(texts, batch_size=32, normalize_embeddings=True), 1)
    n = len(texts)
    return {"sentences": n, "threads": args.threads[0], "batch": 32,
            "qkv_sentences_per_s": n / statistics.median(a), "st_sentences_per_s": n / statistics.median(b),
            "speedup": statistics.median(b) / statistics.median(a)}


def bench_generate(args: argparse.Namespace) -> dict[str, Any]:
    """qkv.LLM.generate tokens/s vs `qkv generate`'s, same prompt, greedy, same threads."""
    threads = args.threads[0]
    qkv.set_num_threads(threads)
    llm = qkv.LLM(args.model)
    new = args.max_new
    prompt: Any = args.prompt
    source = ["--prompt", prompt]
    if not llm._impl.has_tokenizer:  # a folder without vocab.json: the same ids on both sides
        prompt = list(range(100, 116))
        source = ["--prompt-ids", ",".join(map(str, prompt))]
    cmd = [args.cli, "--threads", str(threads), "generate", "--model", args.model, *source,
           "--max-new", str(new), "--json"]
    ours: list[float] = []
    cli: list[float] = []
    ids_cli: list[int] = []
    ids_py: list[int] = []
    for _ in range(args.rounds):
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[0])
        cli.append(float(r["tokens_per_s"]))
        ids_cli = r["new_ids"]
        out = llm.generate(prompt, max_new_tokens=new, details=True)
        ours.append(out.tokens_per_s)
        ids_py = out.ids
    assert ids_cli == ids_py, "qkv.LLM and qkv generate made different tokens"
    return {"model": args.model, "threads": threads, "new_tokens": len(ids_py),
            "python_tokens_per_s": statistics.median(ours), "cli_tokens_per_s": statistics.median(cli),
            "ratio": statistics.median(ours) / statistics.median(cli)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["overhead", "torch", "embed", "generate"])
    p.add_argument("--threads", type=int, nargs="+", default=[1])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=200, help="overhead: calls per round")
    p.add_argument("--model", default="models/all-MiniLM-L6-v2")
    p.add_argument("--corpus", default="data/kjv.txt")
    p.add_argument("--sentences", type=int, default=1024)
    p.add_argument("--cli", default="build/tools/qkv/qkv")
    p.add_argument("--prompt", default="The meaning of attention in a transformer is")
    p.add_argument("--max-new", type=int, default=128)
    args = p.parse_args()
    if args.what == "overhead":
        qkv.set_num_threads(args.threads[0])
    fn = {"overhead": bench_overhead, "torch": bench_torch, "embed": bench_embed, "generate": bench_generate}
    print(json.dumps(fn[args.what](args), indent=2))


if __name__ == "__main__":
    main()
