#!/usr/bin/env python3
"""Writes tests/fixtures/quant/quant_mix.json: the GGML type llama-quantize gives every tensor of
three small shape-only models for each file type qkv writes (Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M,
Q6_K, IQ4_NL, IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16, F32, MXFP4_MOE, and Q4_K_M --pure), for
tests/models/test_quant_mix.cpp (qkv's models::quant_mix_types must give the same type to every
tensor of every mix).

Re-run (~1 min; llama-quantize computes, so under the CPU lock):
    flock /tmp/qkv-cpu.lock env LLAMA_QUANTIZE=/root/peers/llama.cpp-build/bin/llama-quantize \\
        /root/qkv-venv/bin/python tests/reference/make_quant_mix_fixtures.py
LLAMA_QUANTIZE defaults to that path (a llama.cpp build: cmake --build build --target
llama-quantize). The fixture in the repository was made with llama.cpp
0c1e57098bba43ac29e6e3b677cdceebdd22334f. Needs gguf (gguf-py) and numpy.

The models (llama architecture, random F16 matrices and F32 norms; the values do not matter to
the choice, the names, shapes and hyper-parameters do), written to a temporary folder:
  gqa4:  16 layers, n_embd 256, n_ff 512, 4 heads and 1 key/value head (n_gqa 4), vocab 320, an
         output.weight of its own: every row a multiple of 256 (no fallback), use_more_bits and the
         n_layer / 8, n_layer / 16 splits over 16 layers
  tied:  4 layers, n_embd 576 (SmolLM2's: rows of 576 are not a multiple of 256, so the k-quants
         fall back to 32-value types), n_ff 512, 9 heads and 3 key/value heads (n_gqa 3), vocab
         256, tied embeddings (no output.weight)
  moe:   2 layers, n_embd 256, 4 heads and 2 key/value heads, vocab 320, an output.weight of its
         own, and a mixture of 4 experts (2 used) of n_ff 128 in place of the FFN: the router
         ffn_gate_inp (F32) and the 3-D ffn_{gate,up,down}_exps, which MXFP4_MOE makes MXFP4
JSON: {"llama_cpp": commit, "models": [{"name", "model": {arch, n_layer, n_head, n_head_kv,
n_expert}, "tensors": [{"name", "dims" (GGUF order), "type" (as written)}], "mixes": {"Q4_K_M":
[type of each tensor, in "tensors" order], ..., "Q4_K_M --pure": [...]}}]}.

Also, when models/SmolLM2-135M-Instruct.Q4_1.gguf is there (make models), writes
tests/fixtures/quant/smollm2_q4_k_m.json: llama-quantize --allow-requantize of that file to Q4_K_M
(its Q4_1 matrices dequantized and quantized again), each tensor's type and a checksum of its bytes
(the sum over its little-endian 32-bit words w_i of w_i * (2i + 1), mod 2^64, the bytes zero-padded
to a multiple of 4; hex), for tests/models/test_llama.cpp (qkv convert --type q4_k_m of the same file
must write the same bytes).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "quant", "quant_mix.json")
QUANTIZE = os.environ.get("LLAMA_QUANTIZE", "/root/peers/llama.cpp-build/bin/llama-quantize")
COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

MIXES = ["Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS",
         "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16", "F32", "MXFP4_MOE"]
MODELS = [
    dict(name="gqa4", n_layer=16, n_embd=256, n_ff=512, n_head=4, n_head_kv=1, vocab=320, tied=False),
    dict(name="tied", n_layer=4, n_embd=576, n_ff=512, n_head=9, n_head_kv=3, vocab=256, tied=True),
    dict(name="moe", n_layer=2, n_embd=256, n_ff=128, n_head=4, n_head_kv=2, vocab=320, tied=False, n_expert=4),
]


def write_model(path, m, rng):
    w = GGUFWriter(path, "llama")
    w.add_name(m["name"])
    w.add_block_count(m["n_layer"])
    w.add_context_length(256)
    w.add_embedding_length(m["n_embd"])
    w.add_feed_forward_length(m["n_ff"])
    w.add_head_count(m["n_head"])
    w.add_head_count_kv(m["n_head_kv"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(m["vocab"])
    X = m.get("n_expert", 0)
    if X:
        w.add_expert_count(X)
        w.add_expert_used_count(2)
    w.add_file_type(1)
    E, F, V = m["n_embd"], m["n_ff"], m["vocab"]
    D = E // m["n_head"]
    KV = D * m["n_head_kv"]
    order = []  # (name, PyTorch shape, dtype) in the converter's order

    def mat(name, rows, cols):
        order.append((name, (rows, cols), np.float16))

    def vec(name, n):
        order.append((name, (n,), np.float32))

    mat("token_embd.weight", V, E)
    for i in range(m["n_layer"]):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", E)
        mat(p + "attn_q.weight", E, E)
        mat(p + "attn_k.weight", KV, E)
        mat(p + "attn_v.weight", KV, E)
        mat(p + "attn_output.weight", E, E)
        vec(p + "ffn_norm.weight", E)
        if X:
            order.append((p + "ffn_gate_inp.weight", (X, E), np.float32))
            order.append((p + "ffn_gate_exps.weight", (X, F, E), np.float16))
            order.append((p + "ffn_up_exps.weight", (X, F, E), np.float16))
            order.append((p + "ffn_down_exps.weight", (X, E, F), np.float16))
        else:
            mat(p + "ffn_gate.weight", F, E)
            mat(p + "ffn_up.weight", F, E)
            mat(p + "ffn_down.weight", E, F)
    vec("output_norm.weight", E)
    if not m["tied"]:
        mat("output.weight", V, E)
    for name, shape, dtype in order:
        x = (rng.standard_normal(shape) * (0.02 if len(shape) >= 2 else 1.0)).astype(dtype)
        w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return [(name, list(reversed(shape)), "F16" if dtype == np.float16 else "F32") for name, shape, dtype in order]


def types_of(path):
    return {t.name: t.tensor_type.name for t in GGUFReader(path).tensors}


def checksum(b):
    b = np.asarray(b).view(np.uint8).reshape(-1)
    b = np.concatenate([b, np.zeros((-b.size) % 4, np.uint8)])
    w = b.view("<u4").astype(np.uint64)
    return "%016x" % int(np.sum(w * (np.arange(w.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)), dtype=np.uint64))


def smollm2(tmp):
    src = os.path.join(HERE, "..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(src):
        print("no", src, "(make models): smollm2_q4_k_m.json left as it is")
        return
    dst = os.path.join(tmp, "smollm2.Q4_K_M.gguf")
    r = subprocess.run([QUANTIZE, "--allow-requantize", src, dst, "Q4_K_M", "2"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"llama-quantize failed:\n{r.stdout}\n{r.stderr}")
    f = GGUFReader(dst)
    out = {"llama_cpp": COMMIT, "source": "SmolLM2-135M-Instruct.Q4_1.gguf",
           "file_type": int(f.fields["general.file_type"].parts[-1][0]),
           "tensors": {t.name: [t.tensor_type.name, checksum(t.data)] for t in f.tensors}}
    path = os.path.join(HERE, "..", "fixtures", "quant", "smollm2_q4_k_m.json")
    with open(path, "w") as fo:
        json.dump(out, fo, separators=(",", ":"))
        fo.write("\n")
    print(path, os.path.getsize(path), "bytes")


def main():
    rng = np.random.default_rng(20270117)
    out = {"llama_cpp": COMMIT, "models": []}
    with tempfile.TemporaryDirectory() as tmp:
        smollm2(tmp)
        for m in MODELS:
            src = os.path.join(tmp, m["name"] + ".gguf")
            tensors = write_model(src, m, rng)
            mixes = {}
            for mix in MIXES + ["Q4_K_M --pure"]:
                ftype, *flags = mix.split()
                dst = os.path.join(tmp, m["name"] + "." + ftype + ".gguf")
                r = subprocess.run([QUANTIZE, *flags, src, dst, ftype, "2"], capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"llama-quantize {mix} failed:\n{r.stdout}\n{r.stderr}")
                got = types_of(dst)
                assert sorted(got) == sorted(n for n, _, _ in tensors), mix
                mixes[mix] = [got[n] for n, _, _ in tensors]
            out["models"].append({
                "name": m["name"],
                "model": {"arch": "llama", "n_layer": m["n_layer"], "n_head": m["n_head"], "n_head_kv": m["n_head_kv"],
                          "n_expert": m.get("n_expert", 0)},
                "tensors": [{"name": n, "dims": d, "type": t} for n, d, t in tensors],
                "mixes": mixes,
            })
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
