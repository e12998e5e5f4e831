#!/usr/bin/env python3
"""Writes tests/fixtures/quant/mxfp4_hf.safetensors: Hugging Face MXFP4 pairs (gpt-oss's
`*_blocks` / `*_scales`), the ggml MXFP4 blocks llama.cpp's converter makes of them, and
transformers' dequantization, for tests/kernels/test_quant.cpp (Quant.Mxfp4FromHuggingFace:
mxfp4_blocks_from_hf must write these blocks, and dequantize_row of them must give these values).

Re-run (~5 s):
    LLAMA_CPP=/root/peers/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        /root/qkv-venv/bin/python tests/reference/make_mxfp4_hf_fixture.py
LLAMA_CPP defaults to that path: a llama.cpp source tree, whose conversion/gpt_oss.py
(GptOssModel.transform_nibble_layout, the nibble reordering of its repack_mxfp4) is called.
Needs torch, transformers (transformers.integrations.mxfp4.convert_moe_packed_tensors), gguf,
numpy and safetensors. Deterministic (fixed seed).

Tensors:
  hf.blocks  U8   [16, 16]  one expert's row of 16 blocks as stored: byte i holds weight 2i (low
                  nibble) and 2i + 1 (high); blocks 0..7 every code in every nibble (low nibbles
                  0..15, high nibbles 15..0 over the 16 bytes), the others random
  hf.scales  U8   [16]      E8M0 exponents: 0, 1, 2, 127, 128, 253, 254, 255, then random ones in
                  gpt-oss's range (100..140)
  ggml       U8   [272]     repack_mxfp4's bytes for the pair (scale byte, then the 16 reordered)
  values     F32  [512]     convert_moe_packed_tensors(blocks, scales, dtype=float32), the weights in
                  order (E2M1's -0 included: ggml's code 8 is +0, the one difference)
"""
import os
import sys

import numpy as np
import torch
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import dequantize
from safetensors.numpy import save_file
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "quant", "mxfp4_hf.safetensors")
LLAMA_CPP = os.environ.get("LLAMA_CPP", "/root/peers/llama_cpp_python-0.3.36/vendor/llama.cpp")


def main():
    sys.path.insert(0, LLAMA_CPP)
    from conversion.gpt_oss import GptOssModel

    rng = np.random.default_rng(20261208)
    codes = (np.arange(16) | ((15 - np.arange(16)) << 4)).astype(np.uint8)
    blocks = np.concatenate([np.tile(codes, (8, 1)), rng.integers(0, 256, size=(8, 16), dtype=np.uint8)])
    scales = np.concatenate([np.array([0, 1, 2, 127, 128, 253, 254, 255], np.uint8),
                             rng.integers(100, 141, size=8, dtype=np.uint8)])
    b4 = torch.from_numpy(blocks).reshape(1, 1, 16, 16)  # [experts, rows, blocks, 16]
    s3 = torch.from_numpy(scales).reshape(1, 1, 16)
    # repack_mxfp4: the scale byte, then transform_nibble_layout's 16 bytes, per block.
    repacked = torch.concat((s3.unsqueeze(-1), GptOssModel.transform_nibble_layout(None, b4)), dim=-1)
    ggml = repacked.numpy().reshape(-1).astype(np.uint8)
    # convert_moe_packed_tensors returns [experts, in (the blocks' values), rows]: back to rows.
    values = convert_moe_packed_tensors(b4, s3, dtype=torch.float32).transpose(1, 2).reshape(-1).numpy()
    with np.errstate(over="ignore"):  # exponent 255: the largest codes are inf
        ref = np.asarray(dequantize(ggml, T.MXFP4), dtype=np.float32).reshape(-1)
    assert values.shape == ref.shape == (512,)
    # gguf-py's reading of the repacked blocks is transformers' numbers (-0 == +0 here).
    assert np.array_equal(values, ref), np.flatnonzero(values != ref)
    save_file({"hf.blocks": blocks, "hf.scales": scales, "ggml": ggml, "values": values.astype(np.float32)}, OUT,
              metadata={"generator": f"torch {torch.__version__}, llama.cpp conversion/gpt_oss.py of {LLAMA_CPP}"})
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
