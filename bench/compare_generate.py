#!/usr/bin/env python3
"""Greedy generation speed of qkv, Hugging Face transformers and CTranslate2 on
the same GPT-2-small-shape checkpoint, same machine, same thread count.

Every engine reads the same safetensors file: a GPT-2 small (12 layers, n_embd
768, 12 heads, vocab 50257, n_positions 1024) with transformers' default
random initialisation (seed 0), written once into models/gpt2-small-random/
(config.json, model.safetensors, a synthetic byte-level vocab.json of 50257
tokens and an empty merges.txt, which CTranslate2's converter needs; nothing is
downloaded). CTranslate2 runs the same weights converted (float32) into
models/gpt2-small-random-ct2/.

Throughput mode (default): for every round, thread count T and batch B, in
this order, each engine runs once in a fresh child process (the same
environment for all: OMP/MKL_NUM_THREADS=T, OMP_WAIT_POLICY=PASSIVE,
glibc.malloc.hugetlb=1):

  hf   GPT2LMHeadModel.generate(do_sample=False, max_new_tokens=N, no EOS stop),
       PyTorch eager float32, torch.set_num_threads(T); one row per
       --hf-configs entry (cache dynamic|static x torch.inference_mode|no_grad);
       the qkv ratio uses the fastest HF row, which the output names.
  ct2  ctranslate2.Generator(device="cpu", intra_threads=T, inter_threads=1,
       compute_type="float32").generate_batch(sampling_topk=1, max_length=N,
       include_prompt_in_result=False, end_token=[]).
  qkv  QKV --threads T bench generate --model DIR --batch B --prompt-len P
       --new N --prompt-ids FILE --json   (reads its last stdout line)

Each child loads the model, runs one untimed warm-up call, then times one
generate call: tokens/s = B*N / wall time of that call. ms/token is the mean
decode step after the prefill, (wall - prefill) / (N - 1), from a per-step
timestamp callback (HF: a StoppingCriteria that never stops; CT2:
generate_batch's callback; --no-step-times drops them, ms/token is then
wall / N). The prompts are the
same seeded random ids for every engine (written to FILE, one row per line,
space-separated). The table reports medians over rounds and the ratio
qkv tokens/s / engine tokens/s (> 1: qkv is faster). The generated ids of the
first round are compared across engines (first 32 tokens of every row); a
difference prints a WARNING with HF's top-1/top-2 margin at that step (with
random weights a near-tie can flip under legitimate float rounding).

Latency mode (--latency): per-token decode latency at contexts 128..2048 (B=1,
16 new tokens) for qkv with and without its KV cache (`--no-cache`) and HF
with its cache, on models/gpt2-small-random-4k/ (the same shape with
n_positions 4096, since 2048 + 16 > 1024). ms_per_token = (wall - prefill) /
(new - 1): the mean time of one decode step after the prefill (the forward
of the prompt that yields the first token).

  python bench/compare_generate.py --qkv build/tools/qkv/qkv --threads 1 2 --batch 1 8
  python bench/compare_generate.py --engines hf,ct2 --new 4 --rounds 1   # checks the wiring
  python bench/compare_generate.py --qkv build/tools/qkv/qkv --latency --threads 1
  python bench/compare_generate.py ... --json-out gen.json               # every round's raw record

Needs torch, transformers, ctranslate2, safetensors (PyPI; versions in
tests/reference/requirements.txt); CI never runs it.

qkv contract (`bench generate --json`, one JSON object on the last stdout
line): tokens_per_s (B*N / wall of the whole generate call), ms_per_token
(decode step after the prefill, as above), prefill_ms, read_gbs, weight_bytes,
bandwidth_bound_tokens_per_s, fraction_of_bound, peak_rss_mb; optional
first_ids ([B][<=32] generated ids, for the agreement check).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "models"
EOS = 50256
VOCAB = 50257
AGREE = 32  # generated tokens compared across engines
HF_CONFIGS_DEFAULT = "dynamic:inference,static:inference"


# ----------------------------------------------------------------- environment

def child_env(threads: int) -> dict:
    n = str(threads)
    return dict(os.environ, OMP_WAIT_POLICY="PASSIVE", GLIBC_TUNABLES="glibc.malloc.hugetlb=1",
                OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, QKV_NUM_THREADS=n,
                TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")


def peak_rss_mb() -> float:
    """This process's RSS high-water mark (VmHWM; ru_maxrss would include the
    parent's peak, Linux keeps it across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ----------------------------------------------------------------- checkpoints

def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def write_synthetic_tokenizer(folder: Path) -> None:
    """vocab.json with the 256 byte tokens, synthetic tokens up to 50255 and
    <|endoftext|> = 50256; merges.txt without merges. Enough for
    AutoTokenizer (CTranslate2's converter reads the vocabulary and the
    bos/eos/unk tokens from it); the ids in the benchmark are random anyway."""
    byte_tokens = [bytes_to_unicode()[b] for b in range(256)]
    vocab = {t: i for i, t in enumerate(byte_tokens)}
    for i in range(len(vocab), EOS):
        vocab[f"<tok{i}>"] = i
    vocab["<|endoftext|>"] = EOS
    assert len(vocab) == VOCAB and sorted(vocab.values()) == list(range(VOCAB))
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")


def ensure_hf_model(folder: Path, n_positions: int) -> Path:
    """Write (once) a random GPT-2-small-shape checkpoint into folder."""
    need = ("config.json", "model.safetensors", "vocab.json", "merges.txt")
    if all((folder / f).exists() for f in need):
        return folder
    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel
    transformers.utils.logging.disable_progress_bar()
    print(f"# writing {folder.relative_to(REPO)} (random GPT-2 small, n_positions {n_positions}, seed 0)",
          flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cfg = GPT2Config(n_positions=n_positions)  # defaults: 12 x 768, 12 heads, vocab 50257, gelu_new
    model = GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(str(folder))
    gc = folder / "generation_config.json"
    if gc.exists():
        gc.unlink()
    write_synthetic_tokenizer(folder)
    return folder


def ensure_ct2_model(hf_folder: Path, ct2_folder: Path) -> Path:
    if (ct2_folder / "model.bin").exists():
        return ct2_folder
    import ctranslate2
    import transformers
    transformers.utils.logging.disable_progress_bar()
    print(f"# converting to {ct2_folder.relative_to(REPO)} (CTranslate2 float32)", flush=True)
    conv = ctranslate2.converters.TransformersConverter(str(hf_folder))
    conv.convert(str(ct2_folder), quantization="float32", force=True)
    return ct2_folder


def prompt_file(folder: Path, batch: int, plen: int, seed: int) -> Path:
    """Seeded random prompt ids (never EOS), one row per line; shared by all engines."""
    path = folder / f"prompts_b{batch}_p{plen}_s{seed}.txt"
    if not path.exists():
        import numpy as np
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, EOS, size=(batch, plen))
        path.write_text("".join(" ".join(str(int(v)) for v in row) + "\n" for row in ids))
    return path


def read_prompts(path: Path) -> list[list[int]]:
    return [[int(v) for v in line.split()] for line in path.read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------- workers (child processes)

def worker_hf(a) -> dict:
    import torch
    import transformers
    from transformers import GPT2LMHeadModel, StoppingCriteria, StoppingCriteriaList
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(a.threads)
    cache, mode = a.hf_config.split(":")
    model = GPT2LMHeadModel.from_pretrained(a.model, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # exactly N tokens, no EOS stop
    prompts = read_prompts(Path(a.prompts))
    ids = torch.tensor(prompts, dtype=torch.long)
    kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=a.new,
                  pad_token_id=EOS)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    elif cache != "dynamic":
        raise SystemExit(f"--hf-config: cache {cache!r} is not dynamic or static")
    if mode not in ("inference", "no_grad"):
        raise SystemExit(f"--hf-config: mode {mode!r} is not inference or no_grad")

    class Stamps(StoppingCriteria):
        """Records the time each new token is ready (never stops)."""
        def __init__(self):
            self.t = []

        def __call__(self, input_ids, scores, **kw):
            self.t.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    def run(stamps=None, **extra):
        ctx = torch.inference_mode() if mode == "inference" else torch.no_grad()
        kw = dict(kwargs, **extra)
        if stamps is not None:
            kw["stopping_criteria"] = StoppingCriteriaList([stamps])
        with ctx:
            return model.generate(ids, **kw)

    run()  # warm-up
    stamps = None if a.no_step_times else Stamps()
    t0 = time.perf_counter()
    out = run(stamps)
    wall = time.perf_counter() - t0
    new = out[:, ids.shape[1]:]
    assert tuple(new.shape) == (len(prompts), a.new), tuple(new.shape)
    rec = dict(engine="hf", config=a.hf_config, transformers=transformers.__version__,
               torch=torch.__version__, wall_s=wall, tokens_per_s=len(prompts) * a.new / wall,
               ms_per_token=wall * 1e3 / a.new, first_ids=new[:, :AGREE].tolist())
    if stamps is not None:
        rec["prefill_ms"] = (stamps.t[0] - t0) * 1e3
        rec["ms_per_token"] = (stamps.t[-1] - stamps.t[0]) * 1e3 / max(1, a.new - 1)
    if a.margins:
        # Untimed: top-1 minus top-2 logit at each of the first AGREE steps (min over rows).
        k = min(AGREE, a.new)
        with torch.inference_mode():
            o = model.generate(ids, **dict(kwargs, max_new_tokens=k), output_logits=True,
                               return_dict_in_generate=True)
        assert o.sequences[:, ids.shape[1]:].tolist() == new[:, :k].tolist()
        top = torch.topk(torch.stack(o.logits, 1).float(), 2, dim=-1).values  # [B, k, 2]
        rec["margins"] = (top[..., 0] - top[..., 1]).min(0).values.tolist()
    rec["peak_rss_mb"] = peak_rss_mb()
    return rec


def worker_ct2(a) -> dict:
    import ctranslate2
    gen = ctranslate2.Generator(a.model, device="cpu", intra_threads=a.threads, inter_threads=1,
                                compute_type="float32")
    vocab_path = Path(a.model) / "vocabulary.json"
    if vocab_path.exists():
        vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    else:
        vocab = (Path(a.model) / "vocabulary.txt").read_text(encoding="utf-8").split("\n")
    prompts = read_prompts(Path(a.prompts))
    tokens = [[vocab[i] for i in row] for row in prompts]

    stamps: dict[int, float] = {}

    def stamp(step):
        """Records when step's token of the first row is ready (never stops)."""
        if step.batch_id == 0:
            stamps.setdefault(step.step, time.perf_counter())
        return False

    def run(callback=None):
        return gen.generate_batch(tokens, max_length=a.new, sampling_topk=1, beam_size=1,
                                  include_prompt_in_result=False, end_token=[], callback=callback)
    run()  # warm-up
    t0 = time.perf_counter()
    res = run(None if a.no_step_times else stamp)
    wall = time.perf_counter() - t0
    new = [r.sequences_ids[0] for r in res]
    assert all(len(n) == a.new for n in new), [len(n) for n in new]
    rec = dict(engine="ct2", config="float32", ctranslate2=ctranslate2.__version__, wall_s=wall,
               tokens_per_s=len(prompts) * a.new / wall, ms_per_token=wall * 1e3 / a.new,
               first_ids=[n[:AGREE] for n in new])
    if stamps:
        t = [stamps[k] for k in sorted(stamps)]
        assert len(t) == a.new, len(t)
        rec["prefill_ms"] = (t[0] - t0) * 1e3
        rec["ms_per_token"] = (t[-1] - t[0]) * 1e3 / max(1, a.new - 1)
    rec["peak_rss_mb"] = peak_rss_mb()
    return rec


def spawn_worker(engine: str, model: Path, prompts: Path, threads: int, new: int, extra=()) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", engine, "--model", str(model),
           "--prompts", str(prompts), "--worker-threads", str(threads), "--new", str(new), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, env=child_env(threads))
    if p.returncode != 0:
        raise SystemExit(f"{engine} worker failed ({shlex.join(cmd)}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_qkv(exe: str, model: Path, prompts: Path | None, threads: int, batch: int, plen: int, new: int,
            no_cache=False) -> dict:
    cmd = [exe, "--threads", str(threads), "bench", "generate", "--model", str(model), "--batch", str(batch),
           "--prompt-len", str(plen), "--new", str(new), "--json"]
    if prompts is not None:
        cmd += ["--prompt-ids", str(prompts)]
    if no_cache:
        cmd.append("--no-cache")
    p = subprocess.run(cmd, capture_output=True, text=True, env=child_env(threads))
    if p.returncode != 0:
        raise SystemExit(f"qkv failed ({shlex.join(cmd)}):\n{p.stderr[-3000:]}")
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    rec.update(engine="qkv", config="no-cache" if no_cache else "cache")
    return rec


# ----------------------------------------------------------------- throughput mode

def engine_rows(a) -> list[tuple[str, str]]:
    rows = []
    for e in a.engines:
        if e == "hf":
            rows += [("hf", c) for c in a.hf_configs]
        elif e == "ct2":
            rows.append(("ct2", "float32"))
        elif e == "qkv":
            rows.append(("qkv", "cache"))
    return rows


def step_flag(a) -> list[str]:
    return ["--no-step-times"] if a.no_step_times else []


def measure(a, engine, config, model_dirs, prompts, threads, batch, first_round) -> dict:
    if engine == "hf":
        extra = ["--hf-config", config] + (["--margins"] if first_round else [])
        r = spawn_worker("hf", model_dirs["hf"], prompts, threads, a.new, extra + step_flag(a))
    elif engine == "ct2":
        r = spawn_worker("ct2", model_dirs["ct2"], prompts, threads, a.new, step_flag(a))
    else:
        r = run_qkv(a.qkv, model_dirs["hf"], None if a.qkv_no_prompt_ids else prompts, threads, batch,
                    a.prompt_len, a.new)
    return r


def check_agreement(records: list[dict]) -> list[str]:
    """Compare the first-round generated ids of every engine per (threads, batch)."""
    warnings = []
    groups: dict = {}
    for r in records:
        if r["round"] == 0:
            groups.setdefault((r["threads"], r["batch"]), []).append(r)
    for (t, b), rs in sorted(groups.items()):
        ref = next((r for r in rs if r["engine"] == "hf"), rs[0])
        for r in rs:
            if r is ref:
                continue
            if "first_ids" not in r:
                warnings.append(f"NOTE: {r['engine']} (threads {t}, batch {b}) reports no first_ids; "
                                "token agreement not checked")
                continue
            for row, (x, y) in enumerate(zip(ref["first_ids"], r["first_ids"])):
                n = min(len(x), len(y))
                diff = next((k for k in range(n) if x[k] != y[k]), None)
                if diff is None and len(x) != len(y) and n < AGREE:
                    diff = n
                if diff is not None:
                    m = ref.get("margins")
                    mtxt = f", HF top1-top2 margin there {m[diff]:.3g}" if m and diff < len(m) else ""
                    warnings.append(f"WARNING: threads {t} batch {b} row {row}: {r['engine']}[{r['config']}] "
                                    f"differs from {ref['engine']}[{ref['config']}] at generated token "
                                    f"{diff} ({x[diff] if diff < len(x) else '-'} vs "
                                    f"{y[diff] if diff < len(y) else '-'}){mtxt}")
                    break
    # One engine and batch should give the same ids for every thread count.
    by_cfg: dict = {}
    for r in records:
        if r["round"] == 0 and "first_ids" in r:
            by_cfg.setdefault((r["engine"], r["config"], r["batch"]), []).append(r)
    for (e, c, b), rs in sorted(by_cfg.items()):
        for r in rs[1:]:
            if r["first_ids"] != rs[0]["first_ids"]:
                warnings.append(f"WARNING: {e}[{c}] batch {b}: ids with {r['threads']} threads differ from "
                                f"{rs[0]['threads']} threads")
    return warnings


def throughput(a) -> tuple[list[dict], str]:
    hf_dir = ensure_hf_model(MODELS / "gpt2-small-random", 1024)
    dirs = {"hf": hf_dir}
    if "ct2" in a.engines:
        dirs["ct2"] = ensure_ct2_model(hf_dir, MODELS / "gpt2-small-random-ct2")
    prompts = {b: prompt_file(hf_dir, b, a.prompt_len, a.seed) for b in a.batch}
    records = []
    for rnd in range(a.rounds):
        for t in a.threads:
            for b in a.batch:
                for engine, config in engine_rows(a):
                    r = measure(a, engine, config, dirs, prompts[b], t, b, rnd == 0)
                    r.update(round=rnd, threads=t, batch=b, prompt_len=a.prompt_len, new=a.new)
                    records.append(r)
                    print(f"# round {rnd} threads {t} batch {b} {engine}[{config}]: "
                          f"{r['tokens_per_s']:.2f} tokens/s", file=sys.stderr, flush=True)
    # Medians.
    L = ["| engine | config | threads | batch | tokens/s | ms/token | peak RSS MB | qkv/engine |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for t in a.threads:
        for b in a.batch:
            med = {}
            for engine, config in engine_rows(a):
                rs = [r for r in records if r["threads"] == t and r["batch"] == b and r["engine"] == engine
                      and r["config"] == config]
                med[(engine, config)] = dict(
                    tps=statistics.median(r["tokens_per_s"] for r in rs),
                    ms=statistics.median(r["ms_per_token"] for r in rs),
                    rss=max(r.get("peak_rss_mb", 0.0) for r in rs), last=rs[-1])
            hf_rows = [k for k in med if k[0] == "hf"]
            best_hf = max(hf_rows, key=lambda k: med[k]["tps"]) if hf_rows else None
            q = med.get(("qkv", "cache"))
            for (engine, config), m in med.items():
                ratio = f"{q['tps'] / m['tps']:.2f}" if q and engine != "qkv" else ""
                name = engine + (" (best hf)" if (engine, config) == best_hf and len(hf_rows) > 1 else "")
                L.append(f"| {name} | {config} | {t} | {b} | {m['tps']:.2f} | {m['ms']:.2f} | "
                         f"{m['rss']:.0f} | {ratio} |")
            if best_hf:
                notes.append(f"threads {t} batch {b}: fastest HF configuration {best_hf[1]}"
                             + (f"; qkv/hf(best) = {q['tps'] / med[best_hf]['tps']:.2f}" if q else ""))
            if q:
                x = q["last"]
                notes.append(f"threads {t} batch {b}: qkv read_gbs {x.get('read_gbs')}, weight_bytes "
                             f"{x.get('weight_bytes')}, bandwidth-bound {x.get('bandwidth_bound_tokens_per_s')} "
                             f"tokens/s, fraction of bound {x.get('fraction_of_bound')}, prefill_ms "
                             f"{x.get('prefill_ms')}, peak_rss_mb {x.get('peak_rss_mb')} (last round)")
    out = "\n".join(L) + "\n\n" + "\n".join(f"- {n}" for n in notes)
    warns = check_agreement(records)
    if warns:
        out += "\n\n" + "\n".join(warns)
    else:
        out += f"\n\nGenerated ids agree across engines (first {AGREE} tokens of every row, round 0)."
    return records, out


# ----------------------------------------------------------------- latency mode

def latency(a) -> tuple[list[dict], str]:
    hf_dir = ensure_hf_model(MODELS / "gpt2-small-random-4k", 4096)
    new = a.latency_new
    rows = []
    if "qkv" in a.engines:
        rows += [("qkv", "cache"), ("qkv", "no-cache")]
    if "hf" in a.engines:
        rows += [("hf", a.hf_configs[0])]
    records = []
    for rnd in range(a.rounds):
        for t in a.threads:
            for ctx in a.contexts:
                prompts = prompt_file(hf_dir, 1, ctx, a.seed)
                for engine, config in rows:
                    if engine == "qkv":
                        r = run_qkv(a.qkv, hf_dir, None if a.qkv_no_prompt_ids else prompts, t, 1, ctx, new,
                                    no_cache=(config == "no-cache"))
                    else:
                        r = spawn_worker("hf", hf_dir, prompts, t, new, ["--hf-config", config])
                    r.update(round=rnd, threads=t, batch=1, prompt_len=ctx, new=new)
                    records.append(r)
                    print(f"# round {rnd} threads {t} context {ctx} {engine}[{config}]: "
                          f"{r['ms_per_token']:.2f} ms/token", file=sys.stderr, flush=True)
    L = ["| threads | context | " + " | ".join(f"{e}[{c}] ms/token" for e, c in rows) + " | prefill ms ("
         + ", ".join(f"{e}[{c}]" for e, c in rows) + ") |",
         "|---:|---:|" + "---:|" * (len(rows) + 1)]
    for t in a.threads:
        for ctx in a.contexts:
            cells, pre = [], []
            for e, c in rows:
                rs = [r for r in records if r["threads"] == t and r["prompt_len"] == ctx and r["engine"] == e
                      and r["config"] == c]
                cells.append(f"{statistics.median(r['ms_per_token'] for r in rs):.2f}")
                p = [r["prefill_ms"] for r in rs if r.get("prefill_ms") is not None]
                pre.append(f"{statistics.median(p):.1f}" if p else "-")
            L.append(f"| {t} | {ctx} | " + " | ".join(cells) + " | " + ", ".join(pre) + " |")
    return records, "\n".join(L)


# ----------------------------------------------------------------- main

def parse(argv=None):
    ap = argparse.ArgumentParser(description="qkv vs transformers vs CTranslate2 greedy generation speed")
    ap.add_argument("--qkv", default=str(REPO / "build" / "tools" / "qkv" / "qkv"), help="qkv executable")
    ap.add_argument("--engines", default="hf,ct2,qkv", help="comma list of hf, ct2, qkv")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--new", type=int, default=256, help="generated tokens per sequence (exactly)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234, help="seed of the random prompt ids")
    ap.add_argument("--hf-configs", default=HF_CONFIGS_DEFAULT,
                    help="comma list of CACHE:MODE, CACHE dynamic|static, MODE inference|no_grad "
                         "(latency mode uses the first)")
    ap.add_argument("--qkv-no-prompt-ids", action="store_true",
                    help="do not pass --prompt-ids to qkv (it then draws its own prompts)")
    ap.add_argument("--latency", action="store_true", help="per-token latency vs context instead")
    ap.add_argument("--contexts", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    ap.add_argument("--latency-new", type=int, default=16)
    ap.add_argument("--json-out", help="write every round's raw record to this file")
    # internal: child-process workers
    ap.add_argument("--worker", choices=["hf", "ct2"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--prompts", help=argparse.SUPPRESS)
    ap.add_argument("--worker-threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--hf-config", default="dynamic:inference", help=argparse.SUPPRESS)
    ap.add_argument("--margins", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-step-times", action="store_true",
                    help="no per-step timestamp callbacks in HF/CT2 (ms/token then = wall / new, "
                         "prefill included; tokens/s is unaffected by this flag)")
    a = ap.parse_args(argv)
    a.engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    bad = [e for e in a.engines if e not in ("hf", "ct2", "qkv")]
    if bad:
        ap.error(f"--engines: unknown engine {bad[0]!r} (use hf, ct2, qkv)")
    a.hf_configs = [c.strip() for c in a.hf_configs.split(",") if c.strip()]
    for c in a.hf_configs:
        cache, _, mode = c.partition(":")
        if cache not in ("dynamic", "static") or mode not in ("inference", "no_grad"):
            ap.error(f"--hf-configs: {c!r} is not CACHE:MODE with CACHE dynamic|static, MODE inference|no_grad")
    if a.new < 2:
        ap.error("--new must be >= 2")
    return a


def main() -> int:
    a = parse()
    if a.worker:
        a.threads = a.worker_threads
        rec = worker_hf(a) if a.worker == "hf" else worker_ct2(a)
        print(json.dumps(rec))
        return 0
    if "qkv" in a.engines and not os.access(a.qkv, os.X_OK):
        raise SystemExit(f"--qkv {a.qkv}: not an executable (build it, or use --engines hf,ct2)")
    print("$ " + shlex.join([sys.executable] + sys.argv))
    print(f"# {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    records, table = latency(a) if a.latency else throughput(a)
    if not a.latency:
        print(f"# greedy, prompt length {a.prompt_len}, {a.new} new tokens (no EOS stop), "
              f"{a.rounds} interleaved rounds, medians; tokens/s = batch * new / generate wall time; "
              + ("ms/token = wall / new" if a.no_step_times else
                 "ms/token = (wall - prefill) / (new - 1)"))
    else:
        print(f"# batch 1, {a.latency_new} new tokens, ms/token = (wall - prefill) / (new - 1), "
              f"{a.rounds} rounds, medians")
    print(table)
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({"argv": sys.argv, "records": records}, indent=1) + "\n")
        print(f"\n# raw records: {a.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
