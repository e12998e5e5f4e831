#!/usr/bin/env python3
"""Writes tests/fixtures/gguf_ref.gguf with gguf-py's GGUFWriter (PyPI `gguf`, the reader and
writer llama.cpp's converters use).

Re-run:  /root/qkv-venv/bin/python tests/reference/make_gguf_fixture.py
Needs:   gguf, numpy.  Read back by tests/io/test_gguf_write.cpp (GgufReference.*), which
checks every value below and that qkv's writer, given what qkv's reader read, writes the
identical bytes. Deterministic: the same bytes on every run.

gguf-py's writer puts general.architecture first, keeps the order the keys were added in,
drops empty strings and refuses empty arrays; ints in a plain list become i32, floats f32.
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "gguf_ref.gguf")


def block_bytes(rows, row_len, qtype, seed):
    """Random bytes for a [rows, row_len] tensor of a block type (valid input for any reader)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(rows, row_len // block * size), dtype=np.uint8)


def main():
    w = gguf.GGUFWriter(OUT, "llama")
    w.add_name("gguf-py reference")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", 2.0 ** -30)
    w.add_bool("t.bool", True)
    w.add_string("t.string", "h\u00e9llo \u6f22\u5b57 \U0001f600")
    w.add_array("t.strings", ["<s>", "\u0120a", "b c"])
    w.add_array("t.i32s", [1, -2, 3])
    w.add_array("t.f32s", [0.5, -1.5])
    w.add_array("t.bools", [True, False])
    w.add_key_value("t.u8s", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_uint32("general.alignment", 32)

    w.add_tensor("a.f32", np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)  # shape [2, 3]: dims {3, 2}
    w.add_tensor("b.f16", np.array([1.0, -0.5, 65504.0], dtype=np.float16))
    w.add_tensor("c.q8_0", block_bytes(3, 64, Q.Q8_0, 1), raw_dtype=Q.Q8_0)    # [3, 64]
    w.add_tensor("d.q4_1", block_bytes(2, 32, Q.Q4_1, 2), raw_dtype=Q.Q4_1)    # [2, 32]
    w.add_tensor("e.q4_k", block_bytes(1, 256, Q.Q4_K, 3), raw_dtype=Q.Q4_K)   # [1, 256]
    bf16 = np.frombuffer(bytes([0x80, 0x3F, 0x00, 0xC0]), dtype=np.uint8).reshape(1, 4)  # 1.0, -2.0
    w.add_tensor("f.bf16", bf16, raw_dtype=Q.BF16)                             # [1, 2]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = gguf.GGUFReader(OUT)
    assert r.fields["general.architecture"].contents() == "llama"
    assert r.fields["t.u64"].contents() == 2**64 - 1
    assert r.fields["t.strings"].contents() == ["<s>", "\u0120a", "b c"]
    names = [t.name for t in r.tensors]
    assert names == ["a.f32", "b.f16", "c.q8_0", "d.q4_1", "e.q4_k", "f.bf16"], names
    assert [int(x) for x in r.tensors[0].shape] == [3, 2]
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
