#!/usr/bin/env python3
"""Side-by-side timing of qkv and PyTorch on the same machine, same thread count.

For every shape it alternates (interleaves) `qkv bench ... --json` and the
PyTorch equivalent several times and prints the medians and the ratio
torch_ms / qkv_ms (> 1 means qkv is faster). PyTorch runs in its best CPU
configuration: OMP_WAIT_POLICY=PASSIVE, GLIBC_TUNABLES=glibc.malloc.hugetlb=1
and torch.set_num_threads(N) (the script re-executes itself with those set).

  python bench/compare_pytorch.py --qkv build/tools/qkv/qkv --threads 1
  python bench/compare_pytorch.py --qkv build/tools/qkv/qkv --threads 2 --only attention

Needs torch (PyPI); CI never runs it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BEST_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def reexec_with_best_env():
    if all(os.environ.get(k) == v for k, v in BEST_ENV.items()):
        return
    env = dict(os.environ, **BEST_ENV)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def qkv_run(exe, threads, args, repeat):
    cmd = [exe, "--threads", str(threads), "bench"] + args + ["--json", "--repeat", str(repeat)]
    env = dict(os.environ, QKV_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def torch_time(fn, repeat, warmup=1):
    for _ in range(warmup):
        fn()
    ms = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def attention_cases(quick):
    lens = [512, 1024, 2048] if quick else [512, 1024, 2048, 4096, 8192]
    for backward in (False, True):
        for causal in (False, True):
            for L in lens:
                yield dict(batch=4, heads=8, len=L, dim=64, causal=causal, backward=backward)


def gemm_cases():
    for m, n, k in [(1024, 1024, 1024), (512, 64, 512), (2048, 512, 512)]:
        yield dict(m=m, n=n, k=k)


def main():
    reexec_with_best_env()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", required=True, help="path to the qkv executable")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per shape (median taken)")
    ap.add_argument("--only", choices=["attention", "gemm"], default=None)
    ap.add_argument("--quick", action="store_true", help="fewer attention lengths")
    ap.add_argument("--json", action="store_true", help="one JSON object per row")
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rows = []
    print(f"# torch {torch.__version__}, threads {a.threads}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES')}",
          flush=True)

    if a.only in (None, "attention"):
        for c in attention_cases(a.quick):
            B, H, L, D = c["batch"], c["heads"], c["len"], c["dim"]
            fwd = 4.0 * B * H * L * L * D * (0.5 if c["causal"] else 1.0)
            flops = fwd * (3.5 if c["backward"] else 1.0)
            repeat = max(3, min(30, int(2e10 / flops)))
            q, k, v = (torch.randn(B, H, L, D, requires_grad=c["backward"]) for _ in range(3))
            dout = torch.randn(B, H, L, D)

            def step():
                if c["backward"]:
                    q.grad = k.grad = v.grad = None
                    F.scaled_dot_product_attention(q, k, v, is_causal=c["causal"]).backward(dout)
                else:
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, is_causal=c["causal"])

            args = ["attention", "--batch", str(B), "--heads", str(H), "--len", str(L), "--dim", str(D)]
            args += (["--causal"] if c["causal"] else []) + (["--backward"] if c["backward"] else [])
            qs, ts = [], []
            for _ in range(a.rounds):
                qs.append(qkv_run(a.qkv, a.threads, args, repeat)["median_ms"])
                ts.append(torch_time(step, repeat))
            qm, tm = statistics.median(qs), statistics.median(ts)
            rows.append(dict(kind="attention" + ("+bwd" if c["backward"] else ""), shape=f"B{B} H{H} L{L} D{D}",
                             causal=c["causal"], qkv_ms=qm, torch_ms=tm, qkv_gflops=flops / qm / 1e6,
                             torch_gflops=flops / tm / 1e6, ratio=tm / qm))
            print_row(rows[-1], a.json)

    if a.only in (None, "gemm"):
        for c in gemm_cases():
            m, n, k = c["m"], c["n"], c["k"]
            flops = 2.0 * m * n * k
            repeat = max(5, min(100, int(2e10 / flops)))
            A, Bm, C = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
            qs, ts = [], []
            for _ in range(a.rounds):
                qs.append(qkv_run(a.qkv, a.threads, ["gemm", "--m", str(m), "--n", str(n), "--k", str(k)], repeat)["median_ms"])
                ts.append(torch_time(lambda: torch.mm(A, Bm, out=C), repeat))
            qm, tm = statistics.median(qs), statistics.median(ts)
            rows.append(dict(kind="gemm", shape=f"{m}x{n}x{k}", causal=False, qkv_ms=qm, torch_ms=tm,
                             qkv_gflops=flops / qm / 1e6, torch_gflops=flops / tm / 1e6, ratio=tm / qm))
            print_row(rows[-1], a.json)


def print_row(r, as_json):
    if as_json:
        print(json.dumps(r), flush=True)
        return
    print(f"{r['kind']:<15} {r['shape']:<22} causal={str(r['causal']):<5} qkv {r['qkv_ms']:9.2f} ms "
          f"({r['qkv_gflops']:6.1f} GF/s)  torch {r['torch_ms']:9.2f} ms ({r['torch_gflops']:6.1f} GF/s)  "
          f"ratio {r['ratio']:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
