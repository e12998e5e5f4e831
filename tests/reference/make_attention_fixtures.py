#!/usr/bin/env python3
"""Attention weights of real models, as transformers gives them, for `qkv heatmap --model`.

Run (from any directory; a few seconds):

    /root/qkv-venv/bin/python tests/reference/make_attention_fixtures.py

Inputs:
    tests/fixtures/gpt2_tiny                the committed tiny GPT-2 (make_gpt2_fixtures.py)
    models/all-MiniLM-L6-v2                 sentence-transformers' MiniLM (`make models`)

Outputs (tests/fixtures/attention/, float32, a few KB each):
    gpt2_tiny.safetensors     ids I64 [T], layer.{l} F32 [H, T, T] for TEXTS["gpt2_tiny"]
    minilm.safetensors        the same for TEXTS["minilm"] ("I love NLP": [CLS] ... [SEP])
  metadata: text, the tokenizer's tokens as JSON, model_type, transformers' version
  (keys sorted in the file, so a re-run rewrites the same bytes).

Every number is transformers' own: model(ids, output_attentions=True) with the eager
attention (the SDPA kernels do not return weights), float32, eval mode. The models are
loaded in float32 explicitly: gpt2_tiny is stored in float16, which transformers 5 would
keep; widened to float32 it holds exactly what qkv loads. The tokens
are those of the folder's fast tokenizer (GPT2TokenizerFast / BertTokenizerFast),
the ids those qkv's tokenizers must give. The script checks each row sums to 1 and,
for GPT-2, that no query attends to a later key.
"""
import json
import os
import pathlib
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "attention"
TEXTS = {
    # Words, punctuation, a multi-byte character split into byte tokens, and a newline.
    "gpt2_tiny": "And God said, \u201cLet there be light\u201d: and there was light.\n",
    # The tutorials' own sentence, through a real BERT.
    "minilm": "I love NLP",
}


def canonicalize_header(path):
    """Sort the __metadata__ keys of a safetensors header in place: the Rust writer keeps
    them in a HashMap, whose order changes from process to process (as make_fixtures.py)."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    text = data[8:8 + n].decode("utf-8").rstrip(" ")
    header = json.loads(text)
    assert json.dumps(header, separators=(",", ":"), ensure_ascii=False) == text
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    new = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert len(new) == len(text.encode("utf-8"))
    path.write_bytes(data[:8] + new.ljust(n, b" ") + data[8 + n:])


def run(name, folder, model_cls, tok_cls, causal):
    torch.manual_seed(0)
    tok = tok_cls.from_pretrained(folder)
    model = model_cls.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    assert all(p.dtype == torch.float32 for p in model.parameters()), folder
    text = TEXTS[name]
    enc = tok(text, return_tensors="pt")
    ids = enc["input_ids"]
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    tensors = {"ids": ids[0].numpy().astype(np.int64)}
    for l, a in enumerate(out.attentions):
        w = a[0].float().numpy()  # [H, T, T]
        assert np.allclose(w.sum(-1), 1.0, atol=1e-5), (name, l)
        if causal:
            assert np.all(np.triu(w, 1) == 0), (name, l)
        tensors[f"layer.{l}"] = np.ascontiguousarray(w)
    meta = {
        "text": text,
        "tokens": json.dumps(tok.convert_ids_to_tokens(ids[0].tolist()), ensure_ascii=True),
        "model_type": model.config.model_type,
        "transformers": transformers.__version__,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.safetensors"
    tmp = OUT / f"{name}.safetensors.tmp"
    save_file(tensors, str(tmp), metadata=meta)
    canonicalize_header(tmp)
    os.replace(tmp, path)
    print(f"{path.relative_to(ROOT)}: {len(out.attentions)} layers, {w.shape[0]} heads, {w.shape[1]} tokens")


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    run("gpt2_tiny", ROOT / "tests" / "fixtures" / "gpt2_tiny", transformers.GPT2Model,
        transformers.GPT2TokenizerFast, causal=True)
    minilm = ROOT / "models" / "all-MiniLM-L6-v2"
    if not (minilm / "model.safetensors").exists():
        sys.exit(f"{minilm} is missing: run `make models` first")
    run("minilm", minilm, transformers.BertModel, transformers.BertTokenizerFast, causal=False)


if __name__ == "__main__":
    main()
