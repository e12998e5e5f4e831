#!/usr/bin/env python3
"""Where the time of `qkv train lm` goes: a table by op, from Linux perf's CPU samples.

Runs `perf record` on `qkv --threads N train lm --resume` from a step-0 folder made by
`qkv train lm --init-only` (bench/compare_train_lm.py makes one; or give any folder written by
qkv train lm), then groups the samples of every symbol into the op it belongs to (GEMM and its
packing, attention, GELU, LayerNorm, cross-entropy, Adam, ...) and prints a markdown table:
share of all samples and CPU seconds per training step (samples / frequency / steps; start-up,
the first step's page faults, evaluation and saving included).

  python bench/profile_train_lm.py --init /tmp/qkv-compare-train-lm/init-XXXX --threads 2 --steps 12

Needs `perf` (Debian linux-perf) and permission to sample (perf_event_paranoid <= 2 for
one's own processes). The samples are CPU time of all threads (a thread waiting for work
sleeps and is not sampled).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (op, regular expression on the symbol); the first match wins.
GROUPS = [
    ("GEMM micro-kernel", r"gemm_ukernel|gemm_serial|skinny"),
    ("GEMM packing", r"pack_a_|pack_b_|interleave_rows"),
    ("attention (flash, fwd + bwd)", r"flash::|attention"),
    ("GELU (fwd + bwd)", r"gelu"),
    ("LayerNorm (fwd + bwd)", r"layer_norm"),
    ("cross-entropy / log-softmax", r"cross_entropy|log_softmax|softmax"),
    ("AdamW update", r"Adam|Optimizer"),
    ("gradient clipping (norm)", r"clip_grad"),
    ("elementwise (add, mul, ...)", r"map_binary|map_unary|elementwise|sum_to|qkv::add|qkv::mul"),
    ("linear bias (init, gradient)", r"qkv::linear|Linear::forward"),
    ("embedding", r"embedding"),
    ("memcpy / memset", r"memmove|memcpy|memset"),
    ("kernel: page zeroing (fresh memory)", r"clear_page|folio_zero"),
    ("thread pool (wake, wait)", r"Pool|parallel_for|parallel_claim|futex|__lll|pthread"),
]


def classify(sym):
    for name, rx in GROUPS:
        if re.search(rx, sym):
            return name
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "tools", "qkv", "qkv"))
    ap.add_argument("--init", required=True, help="a qkv train lm folder (with its .tokens beside it) to resume from")
    ap.add_argument("--text", nargs="+", default=[os.path.join(ROOT, "data", "kjv.txt")])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12, help="steps to run (--stop-after)")
    ap.add_argument("--freq", type=int, default=499, help="perf samples per second per thread")
    ap.add_argument("--top", type=int, default=0, help="also print the N hottest symbols")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="qkv-profile-")
    run = os.path.join(work, "run")
    shutil.copytree(a.init, run)
    shutil.copyfile(a.init.rstrip("/") + ".tokens", run + ".tokens")
    data = os.path.join(work, "perf.data")
    cmd = ["perf", "record", "-q", "-F", str(a.freq), "-o", data, "--", a.qkv, "--threads", str(a.threads), "train",
           "lm", "--resume", "--out", run, "--text", *a.text, "--json", "--no-progress", "--stop-after", str(a.steps)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio", "-g", "none",
                          "-n", "--percent-limit", "0"], capture_output=True, text=True).stdout
    shares = collections.Counter()
    samples = collections.Counter()
    syms = []
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\d+)\s+\[[.k]\]\s+(.*\S)", line)
        if m:
            pct, n, sym = float(m.group(1)), int(m.group(2)), m.group(3)
            shares[classify(sym)] += pct
            samples[classify(sym)] += n
            syms.append((pct, sym))
    cpu_s = sum(samples.values()) / a.freq
    per_step = wall / a.steps
    print(f"qkv train lm, {a.threads} thread(s), {a.steps} steps in {wall:.1f} s wall ({per_step:.2f} s per step, "
          f"start-up, evaluation and saving included); perf {a.freq} Hz\n")
    print(f"CPU time sampled: {cpu_s:.1f} s = {100 * cpu_s / (wall * a.threads):.0f}% of {a.threads} x wall\n")
    print("| op | share of CPU samples | CPU s per step |")
    print("|---|---:|---:|")
    for name, pct in shares.most_common():
        print(f"| {name} | {pct:.1f}% | {samples[name] / a.freq / a.steps:.3f} |")
    if a.top:
        print(f"\n| symbol | share |\n|---|---:|")
        for pct, sym in sorted(syms, reverse=True)[:a.top]:
            print(f"| `{sym[:110]}` | {pct:.2f}% |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
