#!/usr/bin/env python3
"""Writes tests/fixtures/quant/quant_cases.safetensors: gguf-py's (gguf.quants) dequantization of
random block bytes of every GGML type qkv supports, and its quantization of float rows, for
tests/kernels/test_quant.cpp (bit-for-bit comparisons). (The k-quant and IQ4 quantizers, which
gguf-py does not have, are checked against ggml itself: make_kquant_fixtures.py.)

Re-run:  /root/qkv-venv/bin/python tests/reference/make_quant_fixtures.py     (~1 s)
Needs:   gguf (gguf-py), numpy, safetensors. Deterministic (fixed seed, one row per type).

Tensors (all 1-D):
  deq.<TYPE>.bytes   U8   random blocks (plus edge blocks, below), one row
  deq.<TYPE>.values  F32  gguf.quants.dequantize(bytes, TYPE)
  q.<TYPE>.input     F32  float rows (random scales and edge blocks, all finite unless noted)
  q.<TYPE>.bytes     U8   gguf.quants.quantize(input, TYPE)

Dequantization inputs are random bytes, so half-precision scales are sometimes inf or NaN (a
random f16 has the all-ones exponent 1 time in 32); on top of that every block type gets edge
blocks whose scale fields are: +-0, a subnormal, the largest finite half, +-inf, quiet and
signalling NaNs with payloads, and (two-scale types) both scales NaN / inf and NaN. F32, F16
and BF16 rows are random bit patterns plus every special class (NaN payloads included).
The C++ test compares bit patterns; the one place where numpy's own NaN payload is not a
function of the inputs (an addition of two NaNs, whose result numpy takes from either operand
depending on the array's length) is described there.

MXFP4 (added later, from a generator of its own): random blocks and edge blocks whose exponent
bytes e are 0, 1, 2 (subnormal and smallest normal scales), 127, 128, 253, 254 and 255 (2^127:
the largest codes overflow to inf), each holding all 16 codes; its quantization inputs are
mxfp4_quant_rows() below.

Quantization inputs are finite: numpy casts NaN to an integer through undefined behaviour.
Edge blocks: zeros, a constant, values whose scaled quotients are exact ties (x.5), the largest
magnitude negative, two largest magnitudes of opposite sign, magnitudes that overflow a half
scale (d -> inf), and tiny ones (a subnormal half scale).
"""
import os

import numpy as np
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "fixtures", "quant")
OUT = os.path.join(OUT_DIR, "quant_cases.safetensors")

# name: (block weights, block bytes, byte offsets of the f16 scale fields)
TYPES = {
    "F32": (1, 4, []),
    "F16": (1, 2, []),
    "BF16": (1, 2, []),
    "Q8_0": (32, 34, [0]),
    "Q4_0": (32, 18, [0]),
    "Q4_1": (32, 20, [0, 2]),
    "Q5_0": (32, 22, [0]),
    "Q5_1": (32, 24, [0, 2]),
    "Q4_K": (256, 144, [0, 2]),
    "Q5_K": (256, 176, [0, 2]),
    "Q6_K": (256, 210, [208]),
}
RANDOM_BLOCKS = {32: 24, 256: 6}

# Types added later (issue 37): fewer blocks, drawn from their own generator after the others, so
# the tensors above keep their bytes. (name: block weights, block bytes, f16 scale field offsets)
MORE_TYPES = {
    "Q2_K": (256, 84, [80, 82]),
    "Q3_K": (256, 110, [108]),
    "IQ4_NL": (32, 18, [0]),
    "IQ4_XS": (256, 136, [0]),
}

# Half bit patterns for the edge blocks' scale fields.
H_ZERO, H_NZERO, H_SUB, H_MAX, H_INF, H_NINF = 0x0000, 0x8000, 0x0003, 0x7BFF, 0x7C00, 0xFC00
H_QNAN, H_SNAN, H_NQNAN = 0x7E15, 0x7C2A, 0xFE01
H_ONE, H_SMALL = 0x3C00, 0x2E66  # 1.0, ~0.1


def edge_scales(n_fields):
    single = [H_ZERO, H_NZERO, H_SUB, H_MAX, H_INF, H_NINF, H_QNAN, H_SNAN, H_NQNAN]
    if n_fields == 1:
        return [(s,) for s in single]
    rows = [(s, H_SMALL) for s in single] + [(H_SMALL, s) for s in single]
    rows += [(H_QNAN, H_SNAN), (H_SNAN, H_NQNAN), (H_INF, H_QNAN), (H_INF, H_NINF), (H_INF, H_INF), (H_ONE, H_ONE)]
    return rows


def deq_case(rng, name):
    block, size, fields = TYPES[name]
    if block == 1:
        n = 512
        raw = rng.integers(0, 256, size=n * size, dtype=np.uint8)
        if name == "F32":
            specials = np.array([0, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000,
                                 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC12345, 0x7FBFFFFF, 0x3F800000],
                                dtype=np.uint32)
        else:
            specials = np.array([0, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01,
                                 0xFE55, 0x7DFF, 0x3C00, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0x0080, 0x007F],
                                dtype=np.uint16)
        raw = np.concatenate([specials.view(np.uint8), raw])
        return raw
    nb = RANDOM_BLOCKS[block]
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    edges = []
    for scales in edge_scales(len(fields)):
        b = rng.integers(0, 256, size=size, dtype=np.uint8)
        for off, h in zip(fields, scales):
            b[off:off + 2] = np.array([h], dtype=np.uint16).view(np.uint8)
        edges.append(b)
    # A block with small finite scales (most random-byte blocks have wild ones).
    for _ in range(2):
        b = rng.integers(0, 256, size=size, dtype=np.uint8)
        for off in fields:
            b[off:off + 2] = np.array([H_SMALL], dtype=np.uint16).view(np.uint8)
        edges.append(b)
    return np.concatenate([raw, np.stack(edges)]).reshape(-1)


def deq_case_small(rng, name):
    """MORE_TYPES: a few random blocks, the scale fields zero, +-inf and NaNs (quiet, signalling)
    one at a time and (two-field types) together, and one block of small finite scales."""
    block, size, fields = MORE_TYPES[name]
    raw = [rng.integers(0, 256, size=size, dtype=np.uint8) for _ in range(8 if block == 32 else 1)]
    single = [H_ZERO, H_INF, H_NINF, H_QNAN, H_SNAN]
    rows = [(s,) + (H_SMALL,) * (len(fields) - 1) for s in single]
    if len(fields) == 2:
        rows += [(H_SMALL, H_INF), (H_SMALL, H_QNAN), (H_SMALL, H_SNAN), (H_QNAN, H_SNAN)]
    rows.append((H_SMALL,) * len(fields))
    for scales in rows:
        b = rng.integers(0, 256, size=size, dtype=np.uint8)
        for off, h in zip(fields, scales):
            b[off:off + 2] = np.array([h], dtype=np.uint16).view(np.uint8)
        raw.append(b)
    return np.stack(raw).reshape(-1)


def mxfp4_deq_case(rng):
    """MXFP4: 8 random blocks, then blocks of every code (low nibbles 0..15 over the 16 bytes, high
    nibbles 15..0) under the exponents of the format's ends and middle."""
    raw = [rng.integers(0, 256, size=17, dtype=np.uint8) for _ in range(8)]
    codes = (np.arange(16) | ((15 - np.arange(16)) << 4)).astype(np.uint8)
    for e in [0, 1, 2, 127, 128, 253, 254, 255]:
        raw.append(np.concatenate([np.array([e], np.uint8), codes]))
    return np.stack(raw).reshape(-1)


def mxfp4_quant_rows(rng):
    """Blocks of 32 finite floats for MXFP4's quantizer: noise of several magnitudes; zeros, -0 and
    both; constants; every code exactly (kvalues / 2: amax 6, e = 127); values halfway between
    neighbouring codes (ties: the first code wins); amax exactly at and one ulp below powers of two
    (floor(log2 amax) moves there); the largest floats (e = 252); amax 2^-125, 2^-124, 2^-123 (e =
    0, 1, 2) and below (floor(log2 amax) - 2 + 127 < 0: the float -> uint8 cast wraps around to
    255, 254, ..., 232, a scale of up to 2^127 that rounds every value to code 0)."""
    f32 = np.float32
    kv = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], f32)
    rows = [(rng.standard_normal(32) * s).astype(f32) for s in [1.0, 1e-3, 37.0, 3e4, 1e-30, 1e20]]
    rows.append(np.zeros(32, f32))
    rows.append(np.full(32, -0.0, f32))
    b = rng.standard_normal(32).astype(f32)
    b[::2] = -0.0
    rows.append(b)
    rows.append(np.full(32, 0.75, f32))
    rows.append(np.full(32, -3.0, f32))
    rows.append(rng.permutation(np.concatenate([kv, kv])) * f32(0.5))
    mids = (kv[:7] + kv[1:8]) / 2 * f32(0.5)  # between codes i and i + 1 (d = 0.5)
    rows.append(np.concatenate([[6.0], mids, -mids, mids * f32(1.0000001), -mids * f32(0.9999999),
                                [-6.0, 0.1, 0.2]]).astype(f32))
    for amax in [1.0, 2.0, 4.0, 8.0, 0.5, 1024.0, 1.5, 6.0]:
        for v in [amax, np.nextafter(f32(amax), f32(0))]:
            b = (rng.uniform(-1, 1, 32) * f32(v) * f32(0.9)).astype(f32)
            b[int(rng.integers(0, 32))] = -v if amax == 8.0 else v
            rows.append(b)
    rows.append(np.array([3.4028235e38, -3e38, 1e38] + [1e37] * 29, f32))
    for amax in [2.0**-125, 2.0**-124, 2.0**-123, 2.0**-126, 1.5 * 2.0**-127, 2.0**-128, 1e-40, 1e-45]:
        b = (rng.uniform(-1, 1, 32) * amax).astype(f32)
        b[5] = f32(amax)
        rows.append(b)
    return np.concatenate(rows).astype(f32)


def mxfp4_cases():
    """MXFP4's dequantization bytes and quantization rows (make_kquant_fixtures.py has ggml
    quantize the same rows)."""
    rng = np.random.default_rng(20261207)
    raw = mxfp4_deq_case(rng)
    return raw, mxfp4_quant_rows(rng)


def quant_inputs(rng, name):
    block = 32 if name.startswith("Q") else 1
    rows = []
    for scale in [1.0, 1e-3, 37.0, 3e4]:  # random rows of several magnitudes
        rows.append((rng.standard_normal(block * 4) * scale).astype(np.float32))
    if block == 32:
        b = np.zeros(32, np.float32)
        rows.append(b)                                                     # all zero
        rows.append(np.full(32, 0.75, np.float32))                         # constant
        rows.append(np.full(32, -3.0, np.float32))                         # negative constant
        rows.append((np.arange(32, dtype=np.float32) - 16) * np.float32(0.5))  # ties: x * id = k + 0.5
        rows.append((np.arange(32, dtype=np.float32) - 15))                # largest magnitude positive / ties
        b = rng.standard_normal(32).astype(np.float32)
        b[7] = -9.0
        rows.append(b)                                                     # largest magnitude negative
        b = rng.standard_normal(32).astype(np.float32)
        b[3], b[20] = 5.0, -5.0
        rows.append(b)                                                     # +-max: the first one wins
        rows.append((rng.standard_normal(32) * 1e6).astype(np.float32))   # d overflows a half: inf
        rows.append((rng.standard_normal(32) * 1e-6).astype(np.float32))  # d a subnormal half
        rows.append((rng.standard_normal(32) * 1e-9).astype(np.float32))  # d rounds to a zero half
        b = rng.standard_normal(32).astype(np.float32)
        b[:16] = 0.0
        rows.append(b)
        rows.append(np.linspace(-1, 1, 32, dtype=np.float32) ** 3)
    else:
        bits = rng.integers(0, 2**32, size=256, dtype=np.uint64).astype(np.uint32)
        rows.append(bits.view(np.float32))                                  # random bit patterns (NaNs too)
        specials = np.array([0x477FF000, 0x477FEFFF, 0x477FE000, 0x33800000, 0x33000000, 0x33000001, 0x387FC000,
                             0x387FE000, 0x387FF000, 0x3F801000, 0x3F803000, 0x3F802FFF, 0x7F800001, 0xFF812345,
                             0x7FC00000, 0x7FA00000, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x7F7FFFFF,
                             0x3F808000, 0x3F818000, 0x3F817FFF, 0xFFFFFFFF, 0x7FFF8000, 0x7F7F8000, 0x00008000],
                            dtype=np.uint32)
        rows.append(specials.view(np.float32))
    return np.concatenate(rows).astype(np.float32)


def main():
    rng = np.random.default_rng(20261221)
    tensors = {}
    with np.errstate(all="ignore"):
        for name in TYPES:
            raw = deq_case(rng, name)
            values = np.asarray(dequantize(raw, T[name]), dtype=np.float32).reshape(-1)
            assert values.size * TYPES[name][1] == raw.size * TYPES[name][0], name
            tensors[f"deq.{name}.bytes"] = raw
            tensors[f"deq.{name}.values"] = values
        for name in ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]:
            x = quant_inputs(rng, name)
            if name.startswith("Q"):
                assert np.all(np.isfinite(x)), name
            q = np.asarray(quantize(x, T[name])).reshape(-1).view(np.uint8)
            tensors[f"q.{name}.input"] = x
            tensors[f"q.{name}.bytes"] = q.copy()
            # The round trip gguf-py reads back is what the writer's users see.
            back = dequantize(q, T[name]).reshape(-1)
            assert back.size == x.size, name
        rng2 = np.random.default_rng(20270115)
        for name in MORE_TYPES:
            raw = deq_case_small(rng2, name)
            values = np.asarray(dequantize(raw, T[name]), dtype=np.float32).reshape(-1)
            assert values.size * MORE_TYPES[name][1] == raw.size * MORE_TYPES[name][0], name
            tensors[f"deq.{name}.bytes"] = raw
            tensors[f"deq.{name}.values"] = values
        raw, x = mxfp4_cases()
        tensors["deq.MXFP4.bytes"] = raw
        tensors["deq.MXFP4.values"] = np.asarray(dequantize(raw, T.MXFP4), dtype=np.float32).reshape(-1)
        tensors["q.MXFP4.input"] = x
        tensors["q.MXFP4.bytes"] = np.asarray(quantize(x, T.MXFP4)).reshape(-1).view(np.uint8).copy()
    os.makedirs(OUT_DIR, exist_ok=True)
    import gguf  # noqa: F401  (version in the metadata)
    from importlib.metadata import version
    save_file(tensors, OUT, metadata={"generator": f"gguf {version('gguf')}, numpy {np.__version__}"})
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
