#!/usr/bin/env python3
"""Writes tests/fixtures/quant/kquant_cases.safetensors: ggml's own quantization (llama.cpp's
libggml-base, called through ctypes) of fixed float rows to every block type qkv quantizes, for
tests/kernels/test_quant.cpp (QuantizeEqualsGgmlBitwise: qkv's quantize_row bytes must be these).

Re-run (~1 s):
    GGML_BASE_LIB=/root/peers/llama.cpp-build/bin/libggml-base.so \\
        /root/qkv-venv/bin/python tests/reference/make_kquant_fixtures.py
GGML_BASE_LIB defaults to that path: a llama.cpp build's ggml-base shared library (cmake -B build
&& cmake --build build --target llama-quantize, then build/bin/libggml-base.so). The fixture in
the repository was made with llama.cpp 0c1e57098bba43ac29e6e3b677cdceebdd22334f (the source
vendored by llama-cpp-python 0.3.36). Needs numpy and safetensors. Deterministic (fixed seed).

What is called: ggml_quantize_chunk(type, src, dst, 0, 1, n, NULL), which is what llama-quantize
calls for every tensor (without an importance matrix). For the k-quants and Q4_0 .. Q8_0 it runs
quantize_row_<type>_ref (checked here: the bytes are equal); for IQ4_NL and IQ4_XS it runs
quantize_iq4_nl / quantize_iq4_xs with 7 scale tries (quantize_row_iq4_xs_ref is the same call;
quantize_row_iq4_nl_ref tries no scales and differs, and reads uninitialised codes for a block of
zeros, so it is not the reference).

Tensors:
  input          F32  [3584]: 14 rows of 256 values (one long row to ggml: every type's blocks are
                      independent), each a case below; all finite
  <TYPE>.bytes   U8   ggml's blocks of `input`, TYPE in Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS
                      Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 MXFP4
  MXFP4.edges.bytes  U8  ggml's MXFP4 blocks of make_quant_fixtures.py's MXFP4 rows (its
                      mxfp4_cases(), stored there as q.MXFP4.input: the format's edge cases)
Cases (a row of 256 each): normal noise at scales 1 (two rows), 1e-3, 37 with outliers (1e4, -3e3),
3e4; zeros; a constant, a negative constant; tiny values (1e-9: half scales underflow) and values
below ggml's GROUP_MAX_EPS (1e-17: its all-zero branches); sub-blocks of zeros, of 1e-17 and of a
constant beside noise; small integers (exact ties of the rounding); all positive; all negative.
"""
import ctypes
import os

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "quant", "kquant_cases.safetensors")
LIB = os.environ.get("GGML_BASE_LIB", "/root/peers/llama.cpp-build/bin/libggml-base.so")

# name: (ggml type id, block weights, block bytes, the _ref function equal to ggml_quantize_chunk or None)
TYPES = {
    "Q2_K": (10, 256, 84, "quantize_row_q2_K_ref"),
    "Q3_K": (11, 256, 110, "quantize_row_q3_K_ref"),
    "Q4_K": (12, 256, 144, "quantize_row_q4_K_ref"),
    "Q5_K": (13, 256, 176, "quantize_row_q5_K_ref"),
    "Q6_K": (14, 256, 210, "quantize_row_q6_K_ref"),
    "IQ4_NL": (20, 32, 18, None),
    "IQ4_XS": (23, 256, 136, "quantize_row_iq4_xs_ref"),
    "Q8_0": (8, 32, 34, "quantize_row_q8_0_ref"),
    "Q4_0": (2, 32, 18, "quantize_row_q4_0_ref"),
    "Q4_1": (3, 32, 20, "quantize_row_q4_1_ref"),
    "Q5_0": (6, 32, 22, "quantize_row_q5_0_ref"),
    "Q5_1": (7, 32, 24, "quantize_row_q5_1_ref"),
    "MXFP4": (39, 32, 17, "quantize_row_mxfp4_ref"),
}


def cases(rng):
    n = 256
    rows = [
        rng.standard_normal(n),
        rng.standard_normal(n),
        rng.standard_normal(n) * 1e-3,
    ]
    r = rng.standard_normal(n) * 37
    r[5], r[130], r[200] = 1e4, -3e3, 2.5e3
    rows.append(r)
    rows.append(rng.standard_normal(n) * 3e4)
    rows.append(np.zeros(n))
    rows.append(np.full(n, 0.75))
    rows.append(np.full(n, -3.0))
    rows.append(rng.standard_normal(n) * 1e-9)
    rows.append(rng.standard_normal(n) * 1e-17)
    r = rng.standard_normal(n)
    r[0:16] = 0.0
    r[32:48] = rng.standard_normal(16) * 1e-17
    r[64:96] = 0.5
    r[160:176] = 0.0
    rows.append(r)
    rows.append(rng.integers(-8, 8, size=n).astype(np.float64))
    rows.append(rng.uniform(0.0, 1.0, size=n))
    rows.append(-rng.uniform(0.5, 2.0, size=n))
    return np.concatenate(rows).astype(np.float32)


def main():
    lib = ctypes.CDLL(LIB)
    chunk = lib.ggml_quantize_chunk
    chunk.restype = ctypes.c_size_t
    chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                      ctypes.c_void_p]
    x = cases(np.random.default_rng(20270116))
    assert np.all(np.isfinite(x)) and x.size % 256 == 0
    xp = x.ctypes.data_as(ctypes.c_void_p)
    tensors = {"input": x}
    for name, (tid, block, size, ref) in TYPES.items():
        out = np.zeros(x.size // block * size, dtype=np.uint8)
        written = chunk(tid, xp, out.ctypes.data_as(ctypes.c_void_p), 0, 1, x.size, None)
        assert written == out.size, (name, written, out.size)
        if ref is not None:  # ggml_quantize_chunk is the reference quantizer itself for this type
            again = np.zeros_like(out)
            f = getattr(lib, ref)
            f.restype = None
            f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
            f(xp, again.ctypes.data_as(ctypes.c_void_p), x.size)
            assert np.array_equal(again, out), name
        tensors[f"{name}.bytes"] = out
    from make_quant_fixtures import mxfp4_cases  # beside this script
    e = np.ascontiguousarray(mxfp4_cases()[1], dtype=np.float32)
    out = np.zeros(e.size // 32 * 17, dtype=np.uint8)
    written = chunk(39, e.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), 0, 1, e.size, None)
    assert written == out.size
    tensors["MXFP4.edges.bytes"] = out
    save_file(tensors, OUT, metadata={"generator": "ggml_quantize_chunk of " + os.path.realpath(LIB)})
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
