#!/usr/bin/env python3
"""Sentence-embedding throughput: qkv vs sentence-transformers vs ONNX Runtime vs CTranslate2.

Every engine embeds the same sentences (the ones `qkv bench embed` generates, written with
--dump-sentences) with all-MiniLM-L6-v2 from the same folder, on the same number of threads,
tokenisation, pooling and normalisation included, at each batch size. The engines run
interleaved (round r runs each engine once, in a rotated order) and the table reports the
median sentences/s over the rounds, qkv's ratio to each engine (> 1: qkv faster) and qkv's
matrix-product GFLOP/s as a percentage of the FP32 FMA peak measured in the same rounds
(`qkv bench peak` before each round).

  sentence-transformers  SentenceTransformer(folder).encode(batch_size=B), torch.inference_mode,
                         torch.set_num_threads(N) (PyTorch's best CPU configuration: the script
                         re-executes itself with OMP_WAIT_POLICY=PASSIVE, OMP/MKL_NUM_THREADS=N)
  ONNX Runtime           the BertModel exported by torch.onnx.export (dynamic batch and length),
                         optimised with onnxruntime.transformers' BERT fusions when available,
                         ORT_ENABLE_ALL, intra_op_num_threads=N; HF fast tokenizer; numpy pooling
  CTranslate2            ctranslate2.converters.TransformersConverter(folder) (float32),
                         ctranslate2.Encoder(intra_threads=N); HF fast tokenizer; numpy pooling
  qkv                    `qkv --threads N bench embed --model folder --batch B --json`

The Python engines sort each batch set by length like sentence-transformers does (longest
first) and pad per batch. Before timing, the script checks that every engine's embeddings
agree with sentence-transformers' (cosine >= 0.9999 on the first sentences).

  python bench/compare_embed.py --qkv build/tools/qkv/qkv --threads 1
  python bench/compare_embed.py --qkv build/tools/qkv/qkv --threads 2 --batch 1 32 --rounds 5 --markdown
  python bench/compare_embed.py --qkv build/tools/qkv/qkv --smoke     # tiny settings: checks the wiring only

Needs the venv of tests/reference/requirements.txt (torch, transformers, sentence-transformers,
onnx, onnxruntime, ctranslate2); CI never runs it. Exported models go to --work.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = ("sentence-transformers", "onnxruntime", "ctranslate2", "qkv")


def best_env(threads):
    n = str(threads)
    return {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "OPENBLAS_NUM_THREADS": n, "QKV_NUM_THREADS": n, "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def reexec_with_best_env(threads):
    want = best_env(threads)
    if all(os.environ.get(k) == v for k, v in want.items()):
        return
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **want))


def qkv_json(exe, threads, args):
    cmd = [exe, "--threads", str(threads)] + args + ["--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---- the Python engines: each is (setup once) -> embed(sentences, batch) -> np.ndarray [N, C] ----

def batches_by_length(tok, sentences, batch, max_len):
    """HF ids sorted longest first (sentence-transformers' order), cut into padded numpy batches."""
    import numpy as np
    enc = tok(sentences, truncation=True, max_length=max_len)["input_ids"]
    order = sorted(range(len(enc)), key=lambda i: -len(enc[i]))
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        T = max(len(enc[i]) for i in idx)
        ids = np.zeros((len(idx), T), np.int64)
        mask = np.zeros((len(idx), T), np.int64)
        for r, i in enumerate(idx):
            ids[r, :len(enc[i])] = enc[i]
            mask[r, :len(enc[i])] = 1
        yield idx, ids, mask


def mean_pool_normalise(hidden, mask):
    import numpy as np
    m = mask[:, :, None].astype(np.float32)
    e = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)


class SentenceTransformers:
    def __init__(self, model_dir, threads, work):
        import torch
        from sentence_transformers import SentenceTransformer
        torch.set_num_threads(threads)
        self.torch = torch
        self.model = SentenceTransformer(model_dir, device="cpu")

    def embed(self, sentences, batch):
        with self.torch.inference_mode():
            return self.model.encode(sentences, batch_size=batch, convert_to_numpy=True)


class OnnxRuntime:
    def __init__(self, model_dir, threads, work):
        import onnxruntime as ort
        import torch
        from transformers import AutoModel, AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        path = os.path.join(work, "minilm.onnx")
        if not os.path.exists(path):
            bert = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()

            class Wrapper(torch.nn.Module):  # keyword arguments: BertModel.forward's positional order changes
                def __init__(self, m):
                    super().__init__()
                    self.m = m

                def forward(self, input_ids, attention_mask):
                    return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

            ids = torch.ones((2, 16), dtype=torch.int64)
            with torch.no_grad():
                torch.onnx.export(Wrapper(bert), (ids, torch.ones_like(ids)), path, input_names=["input_ids", "attention_mask"],
                                  output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                                  dynamic_axes={"input_ids": {0: "b", 1: "t"}, "attention_mask": {0: "b", 1: "t"},
                                                "last_hidden_state": {0: "b", 1: "t"}})
            try:  # the BERT fusions (attention, LayerNorm, GELU) of onnxruntime.transformers
                from onnxruntime.transformers import optimizer
                opt = optimizer.optimize_model(path, model_type="bert", num_heads=12, hidden_size=384)
                opt.save_model_to_file(path)
            except Exception as e:  # noqa: BLE001 - the unfused graph still runs
                print(f"onnxruntime: BERT fusions unavailable ({e}); using the plain export", file=sys.stderr)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.max_len = 256

    def embed(self, sentences, batch):
        import numpy as np
        out = np.zeros((len(sentences), 384), np.float32)
        for idx, ids, mask in batches_by_length(self.tok, sentences, batch, self.max_len):
            h = self.sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})[0]
            out[idx] = mean_pool_normalise(h, mask)
        return out


class CTranslate2:
    def __init__(self, model_dir, threads, work):
        import ctranslate2
        from transformers import AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        path = os.path.join(work, "minilm-ct2")
        if not os.path.exists(os.path.join(path, "model.bin")):
            ctranslate2.converters.TransformersConverter(model_dir).convert(path, quantization="float32", force=True)
        self.enc = ctranslate2.Encoder(path, device="cpu", compute_type="float32", intra_threads=threads, inter_threads=1)
        self.ct2 = ctranslate2
        self.max_len = 256

    def embed(self, sentences, batch):
        import numpy as np
        out = np.zeros((len(sentences), 384), np.float32)
        for idx, ids, mask in batches_by_length(self.tok, sentences, batch, self.max_len):
            rows = [list(map(int, r[:int(m.sum())])) for r, m in zip(ids, mask)]
            h = np.array(self.enc.forward_batch(rows).last_hidden_state)
            out[idx] = mean_pool_normalise(h, mask[:, :h.shape[1]])
        return out


PY_ENGINES = {"sentence-transformers": SentenceTransformers, "onnxruntime": OnnxRuntime, "ctranslate2": CTranslate2}


def check_agreement(engines, sentences, model_dir, exe, threads, work):
    """Every engine's embeddings vs sentence-transformers' on the first sentences."""
    import numpy as np
    head = sentences[:8]
    ref = engines["sentence-transformers"].embed(head, 4)
    qkv = []
    with tempfile.NamedTemporaryFile("w", suffix=".txt", dir=work, delete=False, encoding="utf-8") as f:
        f.write("\n".join(head) + "\n")
    out = subprocess.run([exe, "--threads", str(threads), "embed", "--model", model_dir, "--file", f.name, "--json"],
                         check=True, capture_output=True, text=True).stdout
    qkv = np.array([json.loads(l)["embedding"] for l in out.splitlines() if l.strip()], np.float32)
    os.unlink(f.name)
    got = {name: e.embed(head, 4) for name, e in engines.items() if name != "sentence-transformers"}
    got["qkv"] = qkv
    for name, emb in got.items():
        cos = (emb * ref).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
        print(f"agreement {name:>12} vs sentence-transformers: min cosine {cos.min():.7f}, "
              f"max |diff| {np.abs(emb - ref).max():.2e}", file=sys.stderr)
        if cos.min() < 0.9999:
            raise SystemExit(f"{name} disagrees with sentence-transformers (min cosine {cos.min()})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "tools", "qkv", "qkv"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=ENGINES, default=list(ENGINES))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "qkv-compare-embed"))
    ap.add_argument("--markdown", action="store_true", help="Print a markdown table")
    ap.add_argument("--smoke", action="store_true", help="16 sentences, batches 1 and 4, 1 round (wiring check)")
    a = ap.parse_args()
    if a.smoke:
        a.sentences, a.batch, a.rounds = 16, [1, 4], 1
    reexec_with_best_env(a.threads)
    os.makedirs(a.work, exist_ok=True)
    if "qkv" not in a.only:
        a.only.append("qkv")  # qkv generates the sentences and is what the ratios divide

    dump = os.path.join(a.work, "sentences.txt")
    qkv_json(a.qkv, a.threads, ["bench", "embed", "--model", a.model, "--sentences", str(a.sentences), "--batch",
                                str(max(a.batch)), "--repeat", "1", "--warmup", "0", "--dump-sentences", dump])
    sentences = open(dump, encoding="utf-8").read().split("\n")[:-1]
    assert len(sentences) == a.sentences, (len(sentences), a.sentences)

    engines = {}
    for name in ("sentence-transformers", "onnxruntime", "ctranslate2"):
        if name in a.only or name == "sentence-transformers":
            engines[name] = PY_ENGINES[name](a.model, a.threads, a.work)
    check_agreement(engines, sentences, a.model, a.qkv, a.threads, a.work)
    names = [n for n in ENGINES if n in a.only]

    # Warm-up input of every engine: the first 4 batches it will run, i.e. the 4 x batch longest
    # sentences (by token count; every engine sorts longest first), as qkv bench embed --warmup 1.
    from transformers import AutoTokenizer
    ntok = [len(ids) for ids in AutoTokenizer.from_pretrained(a.model)(sentences, truncation=True, max_length=256)["input_ids"]]
    by_len = sorted(range(len(sentences)), key=lambda i: -ntok[i])
    warm = {b: [sentences[i] for i in by_len[:4 * b]] for b in a.batch}

    rates = {(b, n): [] for b in a.batch for n in names}
    qkv_gflops = {b: [] for b in a.batch}
    peaks = []
    for r in range(a.rounds):
        peaks.append(qkv_json(a.qkv, a.threads, ["bench", "peak", "--seconds", "0.25"])["gflops"])
        for b in a.batch:
            order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
            for n in order:
                if n == "qkv":
                    j = qkv_json(a.qkv, a.threads, ["bench", "embed", "--model", a.model, "--sentences",
                                                    str(a.sentences), "--batch", str(b), "--repeat", "1",
                                                    "--warmup", "1"])
                    rates[(b, n)].append(j["sentences_per_s"])
                    qkv_gflops[b].append(j["gflops"])
                else:
                    engines[n].embed(warm[b], b)  # warm-up, as qkv's --warmup 1
                    t0 = time.perf_counter()
                    engines[n].embed(sentences, b)
                    rates[(b, n)].append(a.sentences / (time.perf_counter() - t0))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)

    peak = statistics.median(peaks)
    rows = []
    for b in a.batch:
        q = statistics.median(rates[(b, "qkv")])
        for n in names:
            med = statistics.median(rates[(b, n)])
            rows.append({"batch": b, "engine": n, "sentences_per_s": med, "qkv_ratio": q / med,
                         "threads": a.threads, "rounds": a.rounds})
        rows[-1]["qkv_gflops"] = statistics.median(qkv_gflops[b])
        rows[-1]["qkv_pct_peak"] = 100.0 * rows[-1]["qkv_gflops"] / peak
    if a.markdown:
        print(f"\n{a.sentences} sentences, {a.threads} thread(s), median of {a.rounds} interleaved rounds, "
              f"FP32 peak {peak:.1f} GFLOP/s (qkv bench peak, same rounds)\n")
        print("| batch | engine | sentences/s | qkv / engine | qkv GFLOP/s (% peak) |")
        print("|---:|---|---:|---:|---:|")
        for row in rows:
            extra = f"{row['qkv_gflops']:.1f} ({row['qkv_pct_peak']:.0f}%)" if "qkv_gflops" in row else ""
            print(f"| {row['batch']} | {row['engine']} | {row['sentences_per_s']:.1f} | {row['qkv_ratio']:.2f}x | {extra} |")
    else:
        for row in rows:
            print(json.dumps(row))


if __name__ == "__main__":
    main()
