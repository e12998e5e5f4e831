#!/usr/bin/env python3
"""Attention weights of every decoder architecture, as transformers' output_attentions gives them
(eager attention), for tests/models/test_decoder_attention.cpp (qkv heatmap's numbers).

Writes tests/fixtures/decoder_attention.safetensors and tests/fixtures/decoder_attention.json from
the committed tiny models (tests/fixtures/arch/*, tests/fixtures/llama_family/{llama,mistral,qwen2};
made by make_arch_fixtures.py and make_llama_fixtures.py) and from SmolLM2-135M-Instruct
(models/SmolLM2-135M-Instruct.Q4_1.gguf, which `make models` fetches, dequantized by transformers):

  decoder_attention.json         per model (<arch>_gguf, for gemma3, phi3 and llama2: the arch folder's GGUF
                                 file written by llama.cpp's converter, its Q8_0 weights dequantized by gguf-py
                                 into the same class): the path (relative to the repository), its model_type, the
                                 text (null for the folders without a tokenizer), the model_type (config.json's or
                                 the GGUF architecture) and the token ids
                                 (the tokenizer's, BOS included where it adds one)
  <name>.layer<l>  float32 [H, T, T]  layer l's attention weights computed in float64 (every layer,
                                      every head; rows sum to 1, 0 above the diagonal, 0 outside a
                                      sliding window)
  <name>.err       float64 scalar     max |float32 - float64| over every layer's weights: the float
                                      tolerance of the comparison (the R1 rule)

Every text is longer than the model's sliding window, so the windowed layers' maps have zeros on
both sides. Run from the repository root with the venv that has torch, transformers and gguf:
  /root/qkv-venv/bin/python tests/reference/make_decoder_attention_fixtures.py
Re-running gives the same files (the committed models, deterministic CPU kernels).
"""
from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import gguf
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
SMOL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = "And God said, Let there"  # 17-19 tokens: past every window (8, 16) of the arch models
GGUF_MAPS = ("gemma3", "phi3", "llama2")
# The llama_family folders have no tokenizer: fixed ids longer than mistral's window (8).
IDS = [1, 17, 42, 99, 5, 63, 120, 7, 88, 31, 12, 64, 101, 3, 77, 50]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_arch_fixtures import F64Mode, LowPrecisionCheck, f64_copy, gguf_reference, plain_copy  # noqa: E402

torch.set_num_threads(1)


def attentions(m, ids: list[int]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = m(torch.tensor([ids]), output_attentions=True)
    return [a[0] for a in out.attentions]


def attentions64(m32, ids: list[int]) -> list[torch.Tensor]:
    m64 = f64_copy(m32)
    check = LowPrecisionCheck()
    with torch.no_grad(), F64Mode(), check:
        out = m64(torch.tensor([ids]), output_attentions=True)
    assert not check.bad, sorted(check.bad)
    return [a[0] for a in out.attentions]


def record(name: str, m32, ids: list[int], entry: dict, index: dict, tensors: dict) -> None:
    a32 = attentions(m32, ids)
    a64 = attentions64(m32, ids)
    assert len(a32) == len(a64) == m32.config.get_text_config().num_hidden_layers
    err = max(float((x.double() - y).abs().max()) for x, y in zip(a32, a64))
    for layer, a in enumerate(a64):
        assert a.dtype == torch.float64 and a.shape[1] == a.shape[2] == len(ids)
        tensors[f"{name}.layer{layer}"] = a.float().contiguous()
    tensors[f"{name}.err"] = torch.tensor(err, dtype=torch.float64)
    index[name] = dict(entry, ids=ids)
    print(f"{name:10s} {len(ids):3d} tokens, {len(a64)} layers x {a64[0].shape[0]} heads, float32 error {err:.3g}")


def main() -> None:
    index, tensors = {}, {}
    for folder in sorted(p for p in (FIX / "arch").iterdir() if p.is_dir()):
        tok = AutoTokenizer.from_pretrained(str(folder))
        m = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager")
        ids = tok(TEXT)["input_ids"]
        window = getattr(m.config.get_text_config(), "sliding_window", None)
        assert window is None or len(ids) > window, (folder.name, len(ids), window)
        record(folder.name, m.eval(), ids, {"path": str(folder.relative_to(ROOT)), "text": TEXT,
                                            "model_type": m.config.model_type}, index, tensors)
        # The folder converted by llama.cpp's converter (Q8_0): its dequantized weights in the same class,
        # for the families whose GGUF metadata carries what the maps depend on beyond the weights
        # (Gemma 3's window pattern, Phi-3's LongRoPE factors, a SentencePiece vocabulary's ids).
        if folder.name not in GGUF_MAPS:
            continue
        gpath = folder.parent / f"{folder.name}.gguf"
        g, _ = gguf_reference(folder.name, gpath, m.config)
        g.config._attn_implementation = "eager"
        arch = gguf.GGUFReader(str(gpath)).get_field("general.architecture").contents()
        record(f"{folder.name}_gguf", g.eval(), ids, {"path": str(gpath.relative_to(ROOT)), "text": TEXT,
                                                      "model_type": arch}, index, tensors)
    for name in ("llama", "mistral", "qwen2"):
        folder = FIX / "llama_family" / name
        m = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager")
        record(name, m.eval(), IDS, {"path": str(folder.relative_to(ROOT)), "text": None,
                                     "model_type": m.config.model_type}, index, tensors)
    if not SMOL.exists():
        sys.exit(f"{SMOL} is missing: run make models first")
    tok = AutoTokenizer.from_pretrained(str(SMOL.parent), gguf_file=SMOL.name)
    m = AutoModelForCausalLM.from_pretrained(str(SMOL.parent), gguf_file=SMOL.name, dtype=torch.float32,
                                             attn_implementation="eager")
    m = plain_copy(m)
    m.config._attn_implementation = "eager"
    ids = tok(TEXT)["input_ids"]
    record("smollm2", m, ids, {"path": str(SMOL.relative_to(ROOT)), "text": TEXT, "model_type": "llama"}, index,
           tensors)
    save_file(tensors, str(FIX / "decoder_attention.safetensors"))
    with open(FIX / "decoder_attention.json", "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    size = os.path.getsize(FIX / "decoder_attention.safetensors")
    print(f"wrote {FIX / 'decoder_attention.safetensors'} ({size} bytes)")


if __name__ == "__main__":
    main()
