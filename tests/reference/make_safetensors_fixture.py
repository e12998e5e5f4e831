#!/usr/bin/env python3
"""Writes tests/fixtures/safetensors_ref.safetensors with PyTorch's `safetensors`
package (its numpy front end; same Rust writer as safetensors.torch).

Re-run:  /root/qkv-venv/bin/python tests/reference/make_safetensors_fixture.py
Needs:   safetensors, numpy.  Read back by tests/io/test_safetensors.cpp
(ReferenceFile.*), which checks every value below and that qkv's writer,
given the same tensors in the Python writer's order (dtype size descending,
then name), produces the identical bytes.

Only one metadata key: the Rust writer keeps metadata in a HashMap, so the
order of several keys is not reproducible.
"""
import os
import numpy as np
from safetensors.numpy import save_file, load_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "safetensors_ref.safetensors")

tensors = {
    "w": np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1.0,      # F32 [2,3]
    "ids": np.array([-3, 0, 7], dtype=np.int64),                          # I64 [3]
    "half": np.array([1.5, -2.0], dtype=np.float16),                      # F16 [2]
    "mask": np.array([[True, False], [False, True]]),                     # BOOL [2,2]
    "scalar": np.array(42, dtype=np.uint8),                               # U8 []
    "empty": np.zeros((0, 4), dtype=np.float32),                          # F32 [0,4]
    "d": np.array([3.141592653589793], dtype=np.float64),                 # F64 [1]
}
metadata = {"config": '{"d_model": 16, "note": "tab\\t \u00e9"}'}

save_file(tensors, OUT, metadata=metadata)
back = load_file(OUT)
for k, v in tensors.items():
    assert back[k].dtype == v.dtype and back[k].shape == v.shape and np.array_equal(back[k], v), k
print(OUT, os.path.getsize(OUT), "bytes")
