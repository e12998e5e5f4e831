#!/usr/bin/env python3
"""Loads GGUF files written by qkv's writer (io::write_gguf) with gguf-py's GGUFReader and checks
that gguf-py reads exactly what qkv meant to write. Not run by CI (CI never runs Python).

Re-run:  /root/qkv-venv/bin/python tests/reference/check_gguf_with_gguf_py.py [--build build]
Needs:   gguf, numpy, and a built test_gguf (cmake --build build --target test_gguf).

The files come from the test GgufWrite.SamplesForGgufPy (tests/io/test_gguf_write.cpp), run with
QKV_GGUF_SAMPLES=<scratch dir>: the sample metadata (every value type, string arrays, nested
arrays, extreme values) and tensors of every type qkv knows (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; a scalar, an empty and a 4-d tensor), with alignment 32 and with
general.alignment 64, each beside a JSON description of what it holds. For every key this
script compares gguf-py's value type(s) and value (nested arrays rebuilt from gguf-py's raw
parts, since its contents() flattens them), and for every tensor its name, type, dims, byte
count, offset and bytes. (A real model written by qkv is checked in C++ instead:
GgufSmolLM2.TheWriterReproducesTheFileByteForByte requires qkv's rewrite of
models/SmolLM2-135M-Instruct.Q4_1.gguf to equal the original, which llama.cpp's converter wrote.)
Exit 1 on any difference.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGUFValueType as V

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

NAMES = {"u8": V.UINT8, "i8": V.INT8, "u16": V.UINT16, "i16": V.INT16, "u32": V.UINT32, "i32": V.INT32,
         "f32": V.FLOAT32, "bool": V.BOOL, "string": V.STRING, "array": V.ARRAY, "u64": V.UINT64,
         "i64": V.INT64, "f64": V.FLOAT64}


def rebuild(parts, i, vtype):
    """The value of type vtype whose first part is parts[i]; returns (value, next index)."""
    if vtype == V.STRING:
        return bytes(parts[i + 1]).decode("utf-8"), i + 2
    if vtype == V.ARRAY:
        elem, count = V(int(parts[i][0])), int(parts[i + 1][0])
        i += 2
        out = []
        for _ in range(count):
            v, i = rebuild(parts, i, elem)
            out.append(v)
        return out, i
    x = parts[i][0]
    return (bool(x) if vtype == V.BOOL else x.item()), i + 1


def check_file(path, desc):
    r = gguf.GGUFReader(path)
    problems = []
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    want_keys = [m["key"] for m in desc["metadata"]]
    if keys != want_keys:
        problems.append(f"keys differ: {keys} vs {want_keys}")
    for m in desc["metadata"]:
        f = r.fields.get(m["key"])
        if f is None:
            continue
        vtype = NAMES[m["type"]]
        if f.types[0] != vtype:
            problems.append(f"{m['key']}: gguf-py type {f.types[0].name}, qkv wrote {m['type']}")
            continue
        if vtype == V.ARRAY and m["value"] and f.types[1] != NAMES[m["elem"]]:
            problems.append(f"{m['key']}: gguf-py element type {f.types[1].name}, qkv wrote {m['elem']}")
        # parts: [key length], [key bytes], [value type], then the value
        value, end = rebuild(f.parts, 3, vtype)
        if end != len(f.parts):
            problems.append(f"{m['key']}: {len(f.parts) - end} parts left over")
        if vtype == V.FLOAT32:
            ok = np.float32(value) == np.float32(m["value"])
        elif vtype == V.ARRAY and m["elem"] == "f32":
            ok = np.array_equal(np.array(value, np.float32), np.array(m["value"], np.float32))
        else:
            ok = value == m["value"]
        if not ok:
            problems.append(f"{m['key']}: gguf-py read {value!r}, qkv wrote {m['value']!r}")
        if vtype != V.ARRAY or m["elem"] != "array":  # contents() flattens nested arrays
            c = f.contents()
            if vtype == V.ARRAY and m["elem"] == "f32":
                c_ok = np.array_equal(np.array(c, np.float32), np.array(m["value"], np.float32))
            elif vtype == V.FLOAT32:
                c_ok = np.float32(c) == np.float32(m["value"])
            else:
                c_ok = c == m["value"]
            if not c_ok:
                problems.append(f"{m['key']}: gguf-py contents() {c!r}, qkv wrote {m['value']!r}")
    if [t.name for t in r.tensors] != [t["name"] for t in desc["tensors"]]:
        problems.append("tensor names or order differ")
    for t, w in zip(r.tensors, desc["tensors"]):
        if t.tensor_type.name != w["type"]:
            problems.append(f"tensor {w['name']}: type {t.tensor_type.name}, qkv wrote {w['type']}")
        if [int(d) for d in t.shape] != w["dims"]:
            problems.append(f"tensor {w['name']}: dims {list(t.shape)}, qkv wrote {w['dims']}")
        if t.n_bytes != w["nbytes"]:
            problems.append(f"tensor {w['name']}: {t.n_bytes} bytes, qkv wrote {w['nbytes']}")
        if t.data_offset != r.data_offset + w["offset"]:
            problems.append(f"tensor {w['name']}: data at {t.data_offset}, qkv wrote {r.data_offset + w['offset']}")
        got = np.asarray(t.data).tobytes()
        if got != bytes.fromhex(w["hex"]):
            problems.append(f"tensor {w['name']}: bytes differ")
    print(f"{os.path.basename(path)}: gguf-py read "
          f"{len(keys)} keys, {len(r.tensors)} tensors "
          f"({', '.join(sorted({t.tensor_type.name for t in r.tensors}))}), alignment {r.alignment}: "
          + ("OK" if not problems else f"{len(problems)} PROBLEMS"))
    for p in problems:
        print("   ", p)
    return not problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    test = os.path.join(args.build, "tests", "test_gguf")
    ok = True
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, QKV_GGUF_SAMPLES=d)
        filt = "GgufWrite.SamplesForGgufPy"
        subprocess.run([test, f"--gtest_filter={filt}"], env=env, check=True, stdout=subprocess.DEVNULL)
        names = sorted(n for n in os.listdir(d) if n.endswith(".gguf"))
        assert names, "the test wrote no sample"
        for n in names:
            with open(os.path.join(d, n[:-5] + ".json")) as f:
                ok &= check_file(os.path.join(d, n), json.load(f))
    print("check_gguf_with_gguf_py:", "every file read as written" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
