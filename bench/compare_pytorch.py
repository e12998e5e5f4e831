#!/usr/bin/env python3
"""Side-by-side timing of qkv and PyTorch on the same machine, same thread count.

For every shape it alternates (interleaves) `qkv bench ... --json` and the
PyTorch equivalent several times and prints the medians and the ratio
torch_ms / qkv_ms (> 1 means qkv is faster), the same ratio of the best single
runs of each side, and qkv's GFLOP/s as a percentage of the FP32 FMA peak
measured in the same rounds (`qkv bench peak` before each round: on a shared
machine the peak moves with the load). Suites:

  attention  F.scaled_dot_product_attention  vs `qkv bench attention`
             B=4 H=8 D=64, L 512..8192, causal and not, forward and forward+backward
  gemm       torch.mm(out=)                   vs `qkv bench gemm`
             1024^3, 512x64x512, 2048x512x512
  mha        nn.MultiheadAttention(batch_first=True), self-attention,
             need_weights=False               vs `qkv bench mha`
             B=4 E=512 H=8, L 512/1024/2048; forward (eval, no_grad: PyTorch's
             fast path) and forward+backward (train, input requires grad)
  encoder    one training step of nn.TransformerEncoder(2 x nn.TransformerEncoderLayer(
             batch_first, dropout=0.0, relu, post-norm, eps 1e-5)): zero_grad,
             forward, out.mean().backward(), Adam(lr 1e-3).step()
                                              vs `qkv bench encoder-step`
             B=8 L=128 E=256 H=4 F=1024 and B=4 L=512 E=512 H=8 F=2048

Both engines are credited the same FLOP count (matrix products only, the
formulas in tools/qkv/cmd_bench.cpp), so the GFLOP/s ratio is the time ratio.

PyTorch runs in its best CPU configuration: OMP_WAIT_POLICY=PASSIVE,
GLIBC_TUNABLES=glibc.malloc.hugetlb=1, OMP/MKL/OPENBLAS_NUM_THREADS=N and
torch.set_num_threads(N) (the script re-executes itself with that environment,
which the qkv child processes inherit; qkv also gets QKV_NUM_THREADS=N and
--threads N); Adam uses fused=True where this torch supports it on the CPU.

  python bench/compare_pytorch.py --qkv build/tools/qkv/qkv --threads 1
  python bench/compare_pytorch.py --qkv build/tools/qkv/qkv --threads 2 --only attention
  python bench/compare_pytorch.py --qkv build/tools/qkv/qkv --threads 2 --only mha encoder --markdown
  python bench/compare_pytorch.py --qkv build/tools/qkv/qkv --smoke   # tiny shapes, checks the wiring

Needs torch (PyPI); CI never runs it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SUITES = ("attention", "gemm", "mha", "encoder")


def best_env(threads):
    n = str(threads)
    return {"OMP_WAIT_POLICY": "PASSIVE", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
            "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}


def reexec_with_best_env(threads):
    want = best_env(threads)
    if all(os.environ.get(k) == v for k, v in want.items()):
        return
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **want))


def qkv_run(exe, threads, args, repeat):
    cmd = [exe, "--threads", str(threads), "bench"] + args + ["--json", "--repeat", str(repeat)]
    env = dict(os.environ, QKV_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def torch_time(fn, repeat, warmup=1):
    """(median, min) of `repeat` timed calls in milliseconds."""
    for _ in range(warmup):
        fn()
    ms = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms), min(ms)


def peak_gflops(exe, threads, seconds=0.25):
    """The FP32 FMA peak on `threads` workers right now (`qkv bench peak`)."""
    cmd = [exe, "--threads", str(threads), "bench", "peak", "--seconds", str(seconds), "--json"]
    env = dict(os.environ, QKV_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["gflops"]


def repeat_for(flops, lo, hi):
    """The runs per timing, as `qkv bench` chooses them: ~20 GFLOP, clamped."""
    return max(lo, min(hi, int(2e10 / max(flops, 1.0))))


def compare(a, kind, shape, flops, qkv_args, torch_step, repeat, causal=False, **extra_fields):
    """Alternates qkv (a child process), torch_step (this process) and, unless
    --no-peak, `qkv bench peak` a.rounds times with the same number of timed
    runs; prints and returns the row: medians over rounds of each round's median
    (ratio) and the best single runs of the whole row (ratio_min), plus qkv's
    throughput as a fraction of the FMA peak measured in the same rounds."""
    qs, ts, qmins, tmins, peaks, extra = [], [], [], [], [], []
    for _ in range(a.rounds):
        if not a.no_peak:
            peaks.append(peak_gflops(a.qkv, a.threads))
        r = qkv_run(a.qkv, a.threads, qkv_args, repeat)
        qs.append(r["median_ms"])
        qmins.append(r["min_ms"])
        extra.append(r.get("extra_rss_mb", 0.0))
        tmed, tmin = torch_time(torch_step, repeat)
        ts.append(tmed)
        tmins.append(tmin)
    qm, tm = statistics.median(qs), statistics.median(ts)
    row = dict(kind=kind, shape=shape, causal=causal, qkv_ms=qm, torch_ms=tm, qkv_gflops=flops / qm / 1e6,
               torch_gflops=flops / tm / 1e6, ratio=tm / qm, ratio_min=min(tmins) / min(qmins),
               qkv_extra_rss_mb=max(extra), **extra_fields)
    if peaks:
        row["peak_gflops"] = statistics.median(peaks)
        row["qkv_pct_peak"] = 100.0 * row["qkv_gflops"] / row["peak_gflops"]
    print_row(row, a.json)
    return row


# ---- attention: F.scaled_dot_product_attention ----

def attention_cases(a):
    lens = [16, 33] if a.smoke else a.lens or ([512, 1024, 2048] if a.quick else [512, 1024, 2048, 4096, 8192])
    B, H, D = (1, 2, 8) if a.smoke else (4, 8, 64)
    modes = (False,) if a.forward_only else (True,) if a.backward_only else (False, True)
    for backward in modes:
        for causal in (False, True):
            for L in lens:
                yield dict(batch=B, heads=H, len=L, dim=D, causal=causal, backward=backward)


def run_attention(a, torch, F):
    rows = []
    for c in attention_cases(a):
        B, H, L, D = c["batch"], c["heads"], c["len"], c["dim"]
        fwd = 4.0 * B * H * L * L * D * (0.5 if c["causal"] else 1.0)
        flops = fwd * (3.5 if c["backward"] else 1.0)
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
        rows.append(compare(a, "attention" + ("+bwd" if c["backward"] else ""), f"B{B} H{H} L{L} D{D}", flops,
                            args, step, repeat_for(flops, 3, 30), causal=c["causal"]))
    return rows


# ---- gemm: torch.mm ----

def run_gemm(a, torch):
    rows = []
    shapes = [(33, 17, 9)] if a.smoke else [(1024, 1024, 1024), (512, 64, 512), (2048, 512, 512)]
    for m, n, k in shapes:
        flops = 2.0 * m * n * k
        A, Bm, C = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
        rows.append(compare(a, "gemm", f"{m}x{n}x{k}", flops, ["gemm", "--m", str(m), "--n", str(n), "--k", str(k)],
                            lambda: torch.mm(A, Bm, out=C), repeat_for(flops, 5, 100)))
    return rows


# ---- mha: nn.MultiheadAttention, self-attention, need_weights=False ----

def mha_flops(B, L, E, backward):
    proj, attn = 8.0 * B * L * E * E, 4.0 * B * L * L * E
    return 3.0 * proj + 3.5 * attn if backward else proj + attn


def run_mha(a, torch, nn):
    rows = []
    if a.smoke:
        shapes = [(2, 16, 32, 4)]
    else:
        shapes = [(4, L, 512, 8) for L in ([512] if a.quick else [512, 1024, 2048])]
    for backward in (False, True):
        for B, L, E, H in shapes:
            m = nn.MultiheadAttention(E, H, dropout=0.0, bias=True, batch_first=True)
            x = torch.randn(B, L, E, requires_grad=backward)
            dout = torch.randn(B, L, E)
            m.train(backward)

            def step():
                if backward:
                    m.zero_grad(set_to_none=True)
                    x.grad = None
                    m(x, x, x, need_weights=False)[0].backward(dout)
                else:
                    with torch.no_grad():
                        m(x, x, x, need_weights=False)

            flops = mha_flops(B, L, E, backward)
            args = ["mha", "--batch", str(B), "--len", str(L), "--embed", str(E), "--heads", str(H)]
            args += ["--backward"] if backward else []
            rows.append(compare(a, "mha" + ("+bwd" if backward else ""), f"B{B} L{L} E{E} H{H}", flops, args, step,
                                repeat_for(flops, 3, 30)))
    return rows


# ---- encoder: one training step of a 2-layer post-norm encoder ----

def encoder_flops(B, L, E, F, N):
    per_layer = 3.0 * (8.0 * B * L * E * E + 4.0 * B * L * E * F) + 3.5 * 4.0 * B * L * L * E
    return N * per_layer - 6.0 * B * L * E * E  # layer 0's q/k/v projections need no input gradient


def make_adam(torch, params, lr):
    """Adam in PyTorch's fastest CPU form available: fused=True (torch >= 2.4), else the default."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True), "fused"
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr), "default"


def run_encoder(a, torch, nn):
    rows = []
    if a.smoke:
        shapes = [(2, 8, 16, 2, 32)]
    else:
        shapes = [(8, 128, 256, 4, 1024)] + ([] if a.quick else [(4, 512, 512, 8, 2048)])
    N = a.layers
    for B, L, E, H, F in shapes:
        layer = nn.TransformerEncoderLayer(d_model=E, nhead=H, dim_feedforward=F, dropout=0.0, activation="relu",
                                           layer_norm_eps=1e-5, batch_first=True, norm_first=False)
        enc = nn.TransformerEncoder(layer, num_layers=N, enable_nested_tensor=False)
        enc.train()
        opt, adam_kind = make_adam(torch, enc.parameters(), 1e-3)
        x = torch.randn(B, L, E)

        def step():
            opt.zero_grad(set_to_none=True)
            enc(x).mean().backward()
            opt.step()

        flops = encoder_flops(B, L, E, F, N)
        args = ["encoder-step", "--batch", str(B), "--len", str(L), "--d-model", str(E), "--heads", str(H),
                "--d-ff", str(F), "--layers", str(N)]
        rows.append(compare(a, "encoder-step", f"B{B} L{L} E{E} H{H} F{F} N{N}", flops, args, step,
                            repeat_for(flops, 3, 30), torch_adam=adam_kind))
    return rows


def print_row(r, as_json):
    if as_json:
        print(json.dumps(r), flush=True)
        return
    peak = f"  {r['qkv_pct_peak']:3.0f}% of peak {r['peak_gflops']:5.0f}" if "peak_gflops" in r else ""
    print(f"{r['kind']:<15} {r['shape']:<26} causal={str(r['causal']):<5} qkv {r['qkv_ms']:9.2f} ms "
          f"({r['qkv_gflops']:6.1f} GF/s)  torch {r['torch_ms']:9.2f} ms ({r['torch_gflops']:6.1f} GF/s)  "
          f"ratio {r['ratio']:5.2f}x (best runs {r['ratio_min']:5.2f}x){peak}", flush=True)


def print_markdown(rows, header):
    print(f"\n{header}\n")
    print("| what | shape | causal | qkv ms (GF/s) | torch ms (GF/s) | torch/qkv | best runs | qkv % of peak (peak GF/s) "
          "| qkv extra MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        peak = f"{r['qkv_pct_peak']:.0f}% ({r['peak_gflops']:.0f})" if "peak_gflops" in r else "—"
        print(f"| {r['kind']} | {r['shape']} | {'yes' if r['causal'] else 'no'} | {r['qkv_ms']:.2f} "
              f"({r['qkv_gflops']:.1f}) | {r['torch_ms']:.2f} ({r['torch_gflops']:.1f}) | {r['ratio']:.2f}x | "
              f"{r['ratio_min']:.2f}x | {peak} | {r['qkv_extra_rss_mb']:.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", required=True, help="path to the qkv executable")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per shape (median taken)")
    ap.add_argument("--only", nargs="+", choices=SUITES, default=None, metavar="SUITE",
                    help=f"run only these suites ({', '.join(SUITES)}); default: all")
    ap.add_argument("--quick", action="store_true", help="fewer lengths and shapes")
    ap.add_argument("--forward-only", action="store_true", help="attention suite: forward rows only")
    ap.add_argument("--backward-only", action="store_true", help="attention suite: forward+backward rows only")
    ap.add_argument("--lens", type=int, nargs="+", default=None, metavar="L",
                    help="attention suite: these sequence lengths (default 512..8192, --quick 512..2048)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, one round: checks that the script works")
    ap.add_argument("--layers", type=int, default=2, help="encoder layers for the encoder suite")
    ap.add_argument("--no-peak", action="store_true",
                    help="skip the FMA peak measured before each round (`qkv bench peak`, 0.25 s)")
    ap.add_argument("--json", action="store_true", help="one JSON object per row")
    ap.add_argument("--markdown", action="store_true", help="also print a Markdown table at the end")
    a = ap.parse_args()
    if a.smoke:
        a.rounds = 1
    reexec_with_best_env(a.threads)

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    suites = a.only or SUITES
    header = (f"# torch {torch.__version__}, threads {a.threads}, rounds {a.rounds}, "
              + ", ".join(f"{k}={v}" for k, v in best_env(a.threads).items()))
    print(header, flush=True)
    rows = []
    if "attention" in suites:
        rows += run_attention(a, torch, F)
    if "gemm" in suites:
        rows += run_gemm(a, torch)
    if "mha" in suites:
        rows += run_mha(a, torch, nn)
    if "encoder" in suites:
        rows += run_encoder(a, torch, nn)
    if a.markdown:
        print_markdown(rows, header)


if __name__ == "__main__":
    main()
