#!/usr/bin/env python3
"""Training a GPT-2 on real text: `qkv train lm` against a PyTorch loop that trains exactly
the same thing (same initial weights, batches, loss, optimizer, schedule, evaluation).

The run (issue 12): GPT-2 with --layers 6, --d-model 256, --heads 8, --context 256 and a
4096 byte-level BPE on data/kjv.txt, batch 16, no accumulation.

  weights  `qkv train lm ... --init-only --out INIT` writes the step-0 GPT-2 folder and the
           token cache INIT.tokens; every qkv run is a copy of INIT trained with
           `qkv --threads N train lm --resume --out RUN --text ...` (bitwise equal to a
           straight run); PyTorch loads INIT with GPT2LMHeadModel.from_pretrained
           (attn_implementation sdpa, use_cache=False; dropout is 0 in the folder).
  data     INIT.tokens read with numpy (64-byte header "QKVTOK01", u64 key, u64 count,
           u32 width 2|4, u32 0, u64 text_bytes, u64 vocab_size, then little-endian ids).
           The last n_val = max(T+1, floor(N * val_fraction)) tokens are held out; window
           (step s, micro k, row b) starts at random_bits(seed, (s*K + k)*B + b) % (n_train - T)
           (qkv/core/rng.h: splitmix64's finaliser, reproduced below on masked Python ints).
  loss     F.cross_entropy(logits.view(B*T, V), targets.view(-1)); with K > 1 micro-batches
           each micro loss is scaled by 1/K before backward.
  step     clip_grad_norm_(all parameters, grad_clip) (skipped when 0); AdamW(betas 0.9/0.95,
           eps 1e-8, weight_decay on parameters of rank >= 2 only); lr at step s (0-based) =
           lr*(s+1)/warmup while s < warmup, then lr*(r + (1-r)*0.5*(1+cos(pi*p))),
           r = min_lr/lr, p = clamp((s - warmup)/max(1, steps - warmup), 0, 1)
           (train::Schedule::at).
  eval     every eval_every steps and at the end: windows of T+1 tokens at stride T from the
           start of the held-out tail, at most val_windows of them, batched by B, in
           model.eval() under no_grad; val_loss = summed nats / target tokens.

Engines: qkv; torch eager ("eager"); torch.compile of the model + loss ("compiled",
inductor, default mode; the optimizer step stays eager). Each run is a fresh process with
OMP/MKL_NUM_THREADS=N, OMP_WAIT_POLICY=PASSIVE, torch.set_num_threads(N) or qkv --threads N.

tokens/s: both engines time the training steps only (batch assembly, forward, backward,
clip, AdamW) and not the evaluations: qkv's --json reports carry tokens_per_s over the span
since the previous report, evaluation, sample and save excluded; the PyTorch worker sums
perf_counter() around each step. The speed mode runs --warmup-steps + --timed-steps steps
with an evaluation every --warmup-steps steps and counts only the spans after the first.

Modes:
  check   a small model (2 layers, d_model 64, context 64) for 20 steps, eval every 5, PyTorch
          with foreach=False AdamW: the per-report train and val losses must agree (they
          start from the same weights and see the same batches).
  speed   --rounds interleaved rounds: per round `qkv bench peak`, then for every thread
          count every engine once (order rotated per round); medians and qkv / torch ratios.
  learn   one qkv run and one PyTorch run (--torch-mode) of --steps steps at --threads[0]
          threads, evaluation every --eval-every; both loss curves side by side.

  python bench/compare_train_lm.py --mode check
  python bench/compare_train_lm.py --mode speed --threads 1 2 --rounds 2 --markdown
  python bench/compare_train_lm.py --mode learn --threads 2 --steps 250 --eval-every 25 --markdown
  (add --lock /work/cpu.lock to run every child process under flock on a shared machine)

Tokenizer: --tokenizer DIR (vocab.json + merges.txt), else --vocab-size V: `qkv train lm
--vocab-size V` when this qkv can train a BPE, else a Hugging Face tokenizers BPE (ByteLevel
pre-tokenizer without prefix space, BpeTrainer(vocab_size V, special_tokens <|endoftext|>,
initial_alphabet ByteLevel.alphabet())) trained into --work/hf-bpe-V and passed as --tokenizer.

Needs the venv of tests/reference/requirements.txt (torch, transformers, tokenizers, numpy);
CI never runs it.
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = ("qkv", "eager", "compiled")
MASK = (1 << 64) - 1


# ----------------------------------------------------------------- qkv's batches, bit for bit

def mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def random_bits(seed, counter):
    return mix64(mix64(seed & MASK) ^ ((counter * 0xD1B54A32D192ED03) & MASK))


def read_tokens(path):
    import numpy as np
    with open(path, "rb") as f:
        head = f.read(64)
    if head[:8] != b"QKVTOK01":
        raise SystemExit(f"{path}: not a qkv token file (magic {head[:8]!r})")
    key, count = int.from_bytes(head[8:16], "little"), int.from_bytes(head[16:24], "little")
    width = int.from_bytes(head[24:28], "little")
    text_bytes, vocab = int.from_bytes(head[32:40], "little"), int.from_bytes(head[40:48], "little")
    dt = {2: np.dtype("<u2"), 4: np.dtype("<u4")}[width]
    ids = np.memmap(path, dtype=dt, mode="r", offset=64, shape=(count,))
    return ids, {"key": key, "count": count, "width": width, "text_bytes": text_bytes, "vocab_size": vocab}


def split(n, T, val_fraction):
    n_val = max(T + 1, math.floor(n * val_fraction))
    return n - n_val


def lr_at(o, s):
    if o["warmup"] > 0 and s < o["warmup"]:
        return o["lr"] * (s + 1) / o["warmup"]
    r = o["min_lr"] / o["lr"]
    p = min(max((s - o["warmup"]) / max(1, o["steps"] - o["warmup"]), 0.0), 1.0)
    return o["lr"] * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * p)))


# ----------------------------------------------------------------- the PyTorch worker (a child process)

def torch_worker(spec):
    """Trains spec["dir"] (a GPT-2 folder with its .tokens beside it) as qkv does; prints one
    JSON object per evaluation and a last {"event": "done"} one."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from transformers import GPT2LMHeadModel

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    o = spec["train"]
    B, T, K, seed = o["batch"], o["context"], o["grad_accum"], o["seed"]
    tokens, info = read_tokens(spec["dir"] + ".tokens")
    n_train = split(info["count"], T, o["val_fraction"])
    span = n_train - T
    ar = np.arange(T + 1)

    def batch(s, k):
        starts = np.array([random_bits(seed, (s * K + k) * B + b) % span for b in range(B)], dtype=np.int64)
        w = torch.from_numpy(tokens[starts[:, None] + ar].astype(np.int64))
        return w[:, :T], w[:, 1:]

    model = GPT2LMHeadModel.from_pretrained(spec["dir"], attn_implementation=spec.get("attn", "sdpa"))
    model.config.use_cache = False
    V = model.config.vocab_size
    named = list(model.named_parameters())
    params = [p for _, p in named]
    groups = [{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": o["weight_decay"]},
              {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}]
    opt_kw = {"foreach": False} if spec["optimizer"] == "single" else {"fused": True} if spec["optimizer"] == "fused" else {}
    opt = torch.optim.AdamW(groups, lr=o["lr"], betas=(0.9, 0.95), eps=1e-8, **opt_kw)

    class Loss(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, tgt):
            logits = self.m(input_ids=ids, use_cache=False).logits
            return F.cross_entropy(logits.view(-1, V), tgt.reshape(-1))

    loss_fn = Loss(model)
    if spec["engine"] == "compiled":
        loss_fn = torch.compile(loss_fn)

    def evaluate():
        model.eval()
        tail = info["count"] - n_train
        windows = min(o["val_windows"], (tail - 1) // T)
        nats = 0.0
        with torch.no_grad():
            for w0 in range(0, windows, B):
                nb = min(B, windows - w0)
                starts = n_train + (w0 + np.arange(nb)) * T
                w = torch.from_numpy(tokens[starts[:, None] + ar].astype(np.int64))
                logits = model(input_ids=w[:, :T], use_cache=False).logits
                nats += F.cross_entropy(logits.reshape(-1, V), w[:, 1:].reshape(-1), reduction="sum").item()
        model.train()
        return nats / (windows * T)

    model.train()
    steps, every = o["steps"], o["eval_every"]
    loss_sum, loss_n, span_time, span_items, elapsed = 0.0, 0, 0.0, 0, 0.0
    step_times = []
    for s in range(spec.get("start_step", 0), steps):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(o, s)
        opt.zero_grad(set_to_none=True)
        lsum = 0.0
        for k in range(K):
            ids, tgt = batch(s, k)
            loss = loss_fn(ids, tgt)
            lsum += loss.item()
            (loss if K == 1 else loss * (1.0 / K)).backward()
        if o["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, o["grad_clip"])
        opt.step()
        dt = time.perf_counter() - t0
        step_times.append(dt)
        span_time += dt
        elapsed += dt
        span_items += B * T * K
        loss_sum += lsum / K
        loss_n += 1
        if (every > 0 and (s + 1) % every == 0) or s + 1 == steps:
            val = evaluate()
            print(json.dumps({"event": "eval", "step": s + 1, "train_loss": loss_sum / loss_n, "val_loss": val,
                              "lr": lr_at(o, s), "tokens_per_s": span_items / span_time, "elapsed_s": elapsed}),
                  flush=True)
            loss_sum, loss_n, span_time, span_items = 0.0, 0, 0.0, 0
    print(json.dumps({"event": "done", "step_times": step_times, "elapsed_s": elapsed,
                      "threads": torch.get_num_threads()}), flush=True)


# ----------------------------------------------------------------- the driver

def child_env(threads):
    n = str(threads)
    return dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=n, MKL_NUM_THREADS=n,
                OPENBLAS_NUM_THREADS=n, QKV_NUM_THREADS=n, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")


def run_json_lines(cmd, env, lock):
    if lock:
        cmd = ["flock", lock] + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def hf_tokenizer(text_files, vocab_size, out):
    if os.path.exists(os.path.join(out, "merges.txt")):
        return out
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t0 = time.perf_counter()
    tok.train(text_files, tr)
    os.makedirs(out, exist_ok=True)
    tok.model.save(out)
    print(f"tokenizers BPE: {tok.get_vocab_size()} tokens in {time.perf_counter() - t0:.1f} s -> {out}", file=sys.stderr)
    return out


def qkv_trains_bpe(exe):
    """True when this qkv's `train lm --vocab-size` trains a tokenizer (not a 'give --tokenizer' error)."""
    with tempfile.TemporaryDirectory() as d:
        txt = os.path.join(d, "t.txt")
        with open(txt, "w") as f:
            f.write("a b c\n" * 4)
        p = subprocess.run([exe, "train", "lm", "--text", txt, "--vocab-size", "260", "--out", os.path.join(d, "o"),
                            "--context", "2", "--layers", "1", "--d-model", "8", "--heads", "1", "--init-only"],
                           capture_output=True, text=True)
        return "give --tokenizer" not in p.stderr


class Runs:
    """INIT folders (one per training config) and fresh copies of them for each run."""

    def __init__(self, a):
        self.a = a
        os.makedirs(a.work, exist_ok=True)
        self.n = 0
        self.tok_args = self._tokenizer_args()

    def _tokenizer_args(self):
        a = self.a
        if a.tokenizer:
            return ["--tokenizer", a.tokenizer]
        if qkv_trains_bpe(a.qkv):
            return ["--vocab-size", str(a.vocab_size)]
        return ["--tokenizer", hf_tokenizer(a.text, a.vocab_size, os.path.join(a.work, f"hf-bpe-{a.vocab_size}"))]

    def init(self, model, train):
        """The step-0 folder for this model / training config (written once; qkv is deterministic)."""
        flags = self.tok_args + [f"--{k.replace('_', '-')}={v}" for k, v in sorted(model.items())] + \
            [f"--{k.replace('_', '-')}={v}" for k, v in sorted(train.items())]
        tag = hashlib.sha1(" ".join(flags + self.a.text).encode()).hexdigest()[:10]
        d = os.path.join(self.a.work, "init-" + tag)
        if not os.path.exists(os.path.join(d, "qkv_train_state.safetensors")):
            shutil.rmtree(d, ignore_errors=True)
            run_json_lines([self.a.qkv, "--threads", "1", "train", "lm", "--text", *self.a.text, "--out", d, *flags,
                            "--init-only", "--json"], child_env(1), self.a.lock)
        return d

    def fresh(self, init):
        self.n += 1
        d = os.path.join(self.a.work, f"run-{os.getpid()}-{self.n}")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(init, d)
        shutil.copyfile(init + ".tokens", d + ".tokens")
        return d

    def cleanup(self, d):
        if not self.a.keep:
            shutil.rmtree(d, ignore_errors=True)
            os.remove(d + ".tokens")

    def qkv(self, init, threads):
        d = self.fresh(init)
        t0 = time.perf_counter()
        out = run_json_lines([self.a.qkv, "--threads", str(threads), "train", "lm", "--resume", "--out", d, "--text",
                              *self.a.text, "--json", "--sample-tokens", str(self.a.sample_tokens), "--no-progress"],
                             child_env(threads), self.a.lock)
        wall = time.perf_counter() - t0
        self.cleanup(d)
        return [j for j in out if j.get("event") == "eval"], {"wall_s": wall, **out[-1]}

    def torch(self, init, threads, engine, train, optimizer):
        spec = {"dir": init, "threads": threads, "engine": engine, "train": train, "optimizer": optimizer,
                "attn": self.a.attn}
        t0 = time.perf_counter()
        out = run_json_lines([sys.executable, os.path.abspath(__file__), "--torch-worker", json.dumps(spec)],
                             child_env(threads), self.a.lock)
        wall = time.perf_counter() - t0
        return [j for j in out if j.get("event") == "eval"], {"wall_s": wall, **out[-1]}

    def peak(self, threads):
        return run_json_lines([self.a.qkv, "--threads", str(threads), "bench", "peak", "--seconds", "0.5", "--json"],
                              child_env(threads), self.a.lock)[-1]["gflops"]


def train_config(a, **over):
    t = {"steps": a.steps, "batch": a.batch, "context": a.context, "grad_accum": a.grad_accum, "lr": a.lr,
         "warmup": a.warmup, "min_lr": a.min_lr, "weight_decay": a.weight_decay, "grad_clip": a.grad_clip,
         "eval_every": a.eval_every, "val_fraction": a.val_fraction, "val_windows": a.val_windows, "seed": a.seed}
    t.update(over)
    return t


def model_config(a, **over):
    m = {"layers": a.layers, "d_model": a.d_model, "heads": a.heads}
    m.update(over)
    return m


def span_rate(reports, skip_first, items_per_step):
    """tokens/s over the reports after the first `skip_first` (each covers the steps since the previous)."""
    items = secs = 0.0
    prev = reports[skip_first - 1]["step"] if skip_first > 0 else 0
    for r in reports[skip_first:]:
        n = (r["step"] - prev) * items_per_step
        items += n
        secs += n / r["tokens_per_s"]
        prev = r["step"]
    return items / secs


def torch_versions():
    import torch
    import transformers
    blas = [l.strip() for l in torch.__config__.show().splitlines()
            if any(w in l for w in ("MKL", "BLAS", "oneAPI", "CPU capability", "OpenMP"))]
    blas = [l if len(l) < 160 else l[:l.find(",", l.find("BLAS_INFO"))] + " ..." for l in blas]
    return f"torch {torch.__version__}, transformers {transformers.__version__}", blas


# ----------------------------------------------------------------- modes

def mode_check(a, runs):
    model = model_config(a, layers=2, d_model=64, heads=4)
    train = train_config(a, steps=20, eval_every=5, context=64, batch=8, warmup=5, val_windows=16)
    init = runs.init(model, train)
    q, _ = runs.qkv(init, a.threads[0])
    t, _ = runs.torch(init, a.threads[0], "eager", train, "single")
    print("| step | qkv train | torch train | qkv val | torch val | val rel diff |")
    print("|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for x, y in zip(q, t):
        rel = abs(x["val_loss"] - y["val_loss"]) / y["val_loss"]
        worst = max(worst, rel, abs(x["train_loss"] - y["train_loss"]) / y["train_loss"])
        print(f"| {x['step']} | {x['train_loss']:.6f} | {y['train_loss']:.6f} | {x['val_loss']:.6f} | "
              f"{y['val_loss']:.6f} | {rel:.2e} |")
    print(f"\nlargest relative difference of a train or val loss: {worst:.2e}")
    if len(q) != len(t) or worst > 1e-3:
        raise SystemExit("qkv and the PyTorch loop disagree")


def mode_speed(a, runs):
    every = a.warmup_steps
    steps = a.warmup_steps + a.timed_steps
    if a.timed_steps % every:
        raise SystemExit("--timed-steps must be a multiple of --warmup-steps (the evaluation period)")
    train = train_config(a, steps=steps, eval_every=every, val_windows=a.batch)
    init = runs.init(model_config(a), train)
    per_step = a.batch * a.context * a.grad_accum
    engines = [e for e in ENGINES if e in a.engines]
    rates = {(n, e): [] for n in a.threads for e in engines}
    peaks = {n: [] for n in a.threads}
    raw = []
    for r in range(a.rounds):
        for n in a.threads:
            peaks[n].append(runs.peak(n))
            order = engines[r % len(engines):] + engines[:r % len(engines)]
            for e in order:
                try:
                    if e == "qkv":
                        rep, done = runs.qkv(init, n)
                    else:
                        rep, done = runs.torch(init, n, e, train, a.optimizer)
                except RuntimeError as err:
                    print(f"round {r + 1}: {e} at {n} thread(s) failed: {err}", file=sys.stderr)
                    continue
                rate = span_rate(rep, 1, per_step)
                rates[(n, e)].append(rate)
                raw.append({"round": r + 1, "threads": n, "engine": e, "tokens_per_s": rate,
                            "wall_s": done["wall_s"], "first_span_tokens_per_s": rep[0]["tokens_per_s"]})
                print(json.dumps(raw[-1]), file=sys.stderr, flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"raw": raw, "peaks": peaks}, f, indent=1)
    ver, blas = torch_versions()
    print(f"\n{ver}; " + "; ".join(blas))
    print(f"GPT-2 {a.layers} layers, d_model {a.d_model}, {a.heads} heads, context {a.context}, vocab "
          f"{a.vocab_size}, batch {a.batch} x {a.grad_accum}; {a.warmup_steps} warm-up steps, then "
          f"{a.timed_steps} timed; medians of {a.rounds} interleaved rounds\n")
    print("| threads | engine | tokens/s (median) | all rounds | qkv / engine | FP32 peak GFLOP/s |")
    print("|---:|---|---:|---|---:|---:|")
    for n in a.threads:
        q = statistics.median(rates[(n, "qkv")]) if rates[(n, "qkv")] else float("nan")
        for e in engines:
            v = rates[(n, e)]
            if not v:
                print(f"| {n} | {e} | failed | | | |")
                continue
            med = statistics.median(v)
            ratio = "" if e == "qkv" else f"{q / med:.2f}x"
            pk = f"{statistics.median(peaks[n]):.0f}" if e == engines[0] else ""
            print(f"| {n} | {e} | {med:.0f} | {', '.join(f'{x:.0f}' for x in v)} | {ratio} | {pk} |")


def mode_learn(a, runs):
    n = a.threads[0]
    train = train_config(a)
    init = runs.init(model_config(a), train)
    q, qd = runs.qkv(init, n)
    print(f"qkv: {qd}", file=sys.stderr)
    t, td = runs.torch(init, n, a.torch_mode, train, a.optimizer)
    td.pop("step_times", None)
    print(f"torch {a.torch_mode}: {td}", file=sys.stderr)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"qkv": q, "torch": t, "qkv_done": qd, "torch_done": td}, f, indent=1)
    print(f"\n{n} thread(s); qkv wall {qd['wall_s']:.0f} s (training {qd.get('elapsed_s', 0):.0f} s incl. "
          f"evaluations), torch {a.torch_mode} wall {td['wall_s']:.0f} s (training steps {td['elapsed_s']:.0f} s)\n")
    print(f"| step | lr | qkv train | torch train | qkv val | torch val | (qkv - torch) / torch val | "
          f"qkv tokens/s | torch tokens/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for x, y in zip(q, t):
        rel = (x["val_loss"] - y["val_loss"]) / y["val_loss"]
        print(f"| {x['step']} | {x['lr']:.2e} | {x['train_loss']:.4f} | {y['train_loss']:.4f} | {x['val_loss']:.4f} | "
              f"{y['val_loss']:.4f} | {100 * rel:+.2f}% | {x['tokens_per_s']:.0f} | {y['tokens_per_s']:.0f} |")
    per_step = a.batch * a.context * a.grad_accum
    print(f"\nmean tokens/s after the first report: qkv {span_rate(q, 1, per_step):.0f}, torch {a.torch_mode} "
          f"{span_rate(t, 1, per_step):.0f}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--torch-worker":
        return torch_worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("check", "speed", "learn"), default="speed")
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "tools", "qkv", "qkv"))
    ap.add_argument("--text", nargs="+", default=[os.path.join(ROOT, "data", "kjv.txt")])
    ap.add_argument("--tokenizer", help="folder with vocab.json + merges.txt (default: train one, see --vocab-size)")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--min-lr", type=float, default=2e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--val-windows", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    ap.add_argument("--torch-mode", choices=("eager", "compiled"), default="eager", help="the PyTorch run of --mode learn")
    ap.add_argument("--optimizer", choices=("foreach", "single", "fused"), default="foreach",
                    help="PyTorch AdamW implementation (check mode always uses single, i.e. foreach=False)")
    ap.add_argument("--attn", default="sdpa", help="transformers attn_implementation (sdpa | eager)")
    ap.add_argument("--warmup-steps", type=int, default=4, help="speed: untimed steps (also the evaluation period)")
    ap.add_argument("--timed-steps", type=int, default=12, help="speed: timed steps")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sample-tokens", type=int, default=1, help="qkv's sample per evaluation (untimed)")
    ap.add_argument("--lock", help="run every child under `flock LOCK` (e.g. /work/cpu.lock)")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "qkv-compare-train-lm"))
    ap.add_argument("--keep", action="store_true", help="keep the run folders")
    ap.add_argument("--json-out", help="write the raw measurements here")
    ap.add_argument("--markdown", action="store_true", help="(tables are always markdown; kept for symmetry)")
    a = ap.parse_args()
    a.text = [os.path.abspath(t) for t in a.text]
    runs = Runs(a)
    {"check": mode_check, "speed": mode_speed, "learn": mode_learn}[a.mode](a, runs)


if __name__ == "__main__":
    main()
