#!/usr/bin/env python3
"""Speed of a quantized Llama-family chat model (a GGUF file, e.g. SmolLM2-135M-Instruct Q4_1) in
qkv, llama.cpp and transformers, on the same machine, file and thread count.

For every round and thread count T, in a rotated order, each engine runs in a fresh child process:

  qkv       QKV --threads T bench peak --json                    the FP32 peak of this moment
            QKV --threads T bench generate --model M --prompt-len P --new N --repeat 1 --json
                 -> decode tokens/s (greedy, batch 1, after a P-token prompt), read GB/s measured in the
                    same process, the bandwidth bound (read GB/s / weight bytes per token), its
                    fraction, peak RSS; the same bound from the read bandwidth over a buffer of the
                    weights' size (where the last-level cache holds the weights)
            ... --prompt-len 512 --new 1                         -> prefill tokens/s of a 512-token prompt
            ... --prompt-len D --new 128                         -> decode tokens/s at depth D (--depth)
            (--q8 adds rows of qkv's optional Q8-activation path, marked qkv-q8; --kv-f16 rows with
             a float16 KV cache, --kv-cache f16, marked qkv-f16 and qkv-q8-f16)
  llamacpp  LLAMA_BENCH -m M -t T -p 512 -n N -r 1 -o json       -> pp512 and tgN tokens/s
            LLAMA_BENCH -m M -t T -p 0 -n 128 -d D -r 1 -o json  -> decode at depth D
  hf        transformers' GGUF loader (dequantized to float32), torch.set_num_threads(T):
            generate(do_sample=False) of N tokens after a P-token prompt (decode tokens/s = (N-1) /
            (wall - prefill)), and the forward of a 512-token prompt (prefill tokens/s)

Reported: medians over rounds, and qkv / engine ratios (> 1: qkv is faster).

  python bench/compare_llm.py --qkv build/tools/qkv/qkv --llama-bench /path/to/llama-bench \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --threads 1 2 --rounds 3 --markdown

Needs (for the peers) llama.cpp's llama-bench built from the llama-cpp-python sdist's source, and
torch + transformers + gguf from PyPI; CI never runs it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

HF_CHILD = r"""
import json, os, sys, time
import torch
from transformers import AutoModelForCausalLM
T, P, N, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(T)
d, f = os.path.split(os.path.abspath(path))
m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
g = torch.Generator().manual_seed(0)
V = m.config.vocab_size
prompt = torch.randint(3, V, (1, P), generator=g)
stamps = []
class Stamp:
    def __call__(self, input_ids, scores, **kw):
        stamps.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)
with torch.inference_mode():
    m.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=8, min_new_tokens=8,
               pad_token_id=0, eos_token_id=None)
    stamps.clear()
    from transformers import StoppingCriteriaList
    t0 = time.perf_counter()
    m.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=N, min_new_tokens=N,
               pad_token_id=0, eos_token_id=None, stopping_criteria=StoppingCriteriaList([Stamp()]))
    decode_tps = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    long = torch.randint(3, V, (1, 512), generator=g)
    m(long)
    t0 = time.perf_counter()
    m(long)
    prefill_tps = 512 / (time.perf_counter() - t0)
print(json.dumps({"decode_tokens_per_s": decode_tps, "prefill_tokens_per_s": prefill_tps}))
"""


def run(cmd: list[str], env: dict | None = None) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout


def last_json(out: str) -> dict:
    return json.loads([ln for ln in out.strip().splitlines() if ln.startswith("{")][-1])


QKV_ENGINES = {"qkv": ("f32", "f32"), "qkv-q8": ("q8", "f32"), "qkv-f16": ("f32", "f16"), "qkv-q8-f16": ("q8", "f16")}


def qkv_runs(a, T: int, engine: str) -> dict:
    activations, kv = QKV_ENGINES[engine]
    base = [a.qkv, "--threads", str(T), "bench", "generate", "--model", a.model, "--repeat", "1", "--json",
            "--activations", activations, "--kv-cache", kv]
    r = {}
    d = last_json(run(base + ["--prompt-len", str(a.prompt), "--new", str(a.new)]))
    r.update(decode=d["decode_tokens_per_s"], read_gbs=d["read_gbs"], bound=d["bandwidth_bound_tokens_per_s"],
             fraction=d["fraction_of_bound"], rss=d["peak_rss_mb"], weight_mb=d["weights_mb"])
    if "read_gbs_weight_size" in d:  # read over a buffer of the weights' size (a cache that holds them)
        r.update(read_gbs_w=d["read_gbs_weight_size"], bound_w=d["bound_weight_size_tokens_per_s"],
                 fraction_w=d["fraction_of_bound_weight_size"])
    r["prefill"] = last_json(run(base + ["--prompt-len", "512", "--new", "1"]))["prefill_tokens_per_s"]
    if a.depth:
        dd = last_json(run(base + ["--prompt-len", str(a.depth), "--new", "128"]))
        r["depth"] = dd["decode_tokens_per_s"]
        r["depth_rss"] = dd["peak_rss_mb"]
    return r


def llamacpp_runs(a, T: int) -> dict:
    r = {}
    out = json.loads(run([a.llama_bench, "-m", a.model, "-t", str(T), "-p", "512", "-n", str(a.new), "-r", "1", "-o",
                          "json"]))
    for e in out:
        if e["n_prompt"] == 512 and e["n_gen"] == 0:
            r["prefill"] = e["avg_ts"]
        if e["n_gen"] == a.new and e["n_prompt"] == 0:
            r["decode"] = e["avg_ts"]
    if a.depth:
        out = json.loads(run([a.llama_bench, "-m", a.model, "-t", str(T), "-p", "0", "-n", "128", "-d", str(a.depth),
                              "-r", "1", "-o", "json"]))
        r["depth"] = out[0]["avg_ts"]
    return r


def hf_runs(a, T: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(T), MKL_NUM_THREADS=str(T))
    d = last_json(run([a.python, "-c", HF_CHILD, str(T), str(a.prompt), str(a.new), a.model], env=env))
    return {"decode": d["decode_tokens_per_s"], "prefill": d["prefill_tokens_per_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=str(REPO / "build/tools/qkv/qkv"))
    ap.add_argument("--llama-bench", default="/work/scratch/llamacpp/build/bin/llama-bench")
    ap.add_argument("--python", default=sys.executable, help="the Python with torch + transformers (hf)")
    ap.add_argument("--model", default=str(REPO / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--depth", type=int, default=2048, help="decode at this context depth (0: skip)")
    ap.add_argument("--engines", default="qkv,llamacpp,hf")
    ap.add_argument("--q8", action="store_true", help="also run qkv's Q8-activation path")
    ap.add_argument("--kv-f16", action="store_true", help="also run qkv with a float16 KV cache (--kv-cache f16)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    engines = a.engines.split(",")
    if "qkv" in engines:
        extra = (["qkv-q8"] if a.q8 else []) + (["qkv-f16"] if a.kv_f16 else []) + \
                (["qkv-q8-f16"] if a.q8 and a.kv_f16 else [])
        engines[engines.index("qkv") + 1:engines.index("qkv") + 1] = extra
    rec: dict = {}
    for rnd in range(a.rounds):
        for T in a.threads:
            order = engines[rnd % len(engines):] + engines[:rnd % len(engines)]
            peak = last_json(run([a.qkv, "--threads", str(T), "bench", "peak", "--json"]))
            rec.setdefault((T, "peak"), []).append(peak.get("gflops", peak.get("gflop_s", 0)))
            for e in order:
                t0 = time.time()
                if e in QKV_ENGINES:
                    r = qkv_runs(a, T, e)
                elif e == "llamacpp":
                    r = llamacpp_runs(a, T)
                else:
                    r = hf_runs(a, T)
                for k, v in r.items():
                    rec.setdefault((T, e, k), []).append(v)
                print(f"round {rnd} threads {T} {e}: {json.dumps(r)} ({time.time() - t0:.0f} s)", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in rec.items()}
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({"|".join(map(str, k)): v for k, v in rec.items()}, indent=1))
    for T in a.threads:
        print(f"\n### {T} thread{'s' if T > 1 else ''} (FP32 peak {med[(T, 'peak')]:.0f} GFLOP/s; medians of "
              f"{a.rounds} rounds)\n")
        print("| engine | decode tok/s | prefill tok/s (512) | decode tok/s at depth %d | decode: qkv x | prefill: qkv x "
              "| depth: qkv x |" % a.depth)
        print("|---|---|---|---|---|---|---|")
        q = {k: med.get((T, "qkv", k)) for k in ("decode", "prefill", "depth")}
        for e in engines:
            row = [med.get((T, e, k)) for k in ("decode", "prefill", "depth")]
            ratios = [(q[k] / v if (q[k] and v) else None) for k, v in zip(("decode", "prefill", "depth"), row)]
            fmt = lambda x, p=1: "-" if x is None else f"{x:.{p}f}"
            print(f"| {e} | {fmt(row[0])} | {fmt(row[1])} | {fmt(row[2])} | {fmt(ratios[0], 2)} | {fmt(ratios[1], 2)} "
                  f"| {fmt(ratios[2], 2)} |")
        for e in QKV_ENGINES:
            if (T, e, "read_gbs") in med:
                print(f"\n{e}: read bandwidth {med[(T, e, 'read_gbs')]:.1f} GB/s, weights {med[(T, e, 'weight_mb')]:.1f} "
                      f"MB/token -> bound {med[(T, e, 'bound')]:.0f} tok/s; decode = {100 * med[(T, e, 'fraction')]:.0f}% "
                      f"of the bound; peak RSS {med[(T, e, 'rss')]:.0f} MB (at depth {a.depth}: "
                      f"{med.get((T, e, 'depth_rss'), 0):.0f} MB)")
                if (T, e, "read_gbs_w") in med:
                    print(f"{e}: read bandwidth over a buffer of the weights' size {med[(T, e, 'read_gbs_w')]:.1f} GB/s "
                          f"-> bound {med[(T, e, 'bound_w')]:.0f} tok/s; decode = {100 * med[(T, e, 'fraction_w')]:.0f}% "
                          f"of it")


if __name__ == "__main__":
    main()
