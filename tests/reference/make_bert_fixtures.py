#!/usr/bin/env python3
"""Reference values for qkv's BERT / WordPiece / sentence-embedding parity tests.

Reads tests/fixtures/bert/sentences.txt (UTF-8, one sentence per line, split on b"\\n" only, so
control characters and other line-like separators stay inside their line) and the model folder
models/all-MiniLM-L6-v2 (fetched by `make models`), offline, and writes

  tests/fixtures/bert/tokens.safetensors
      ids      I64 [total]   Hugging Face tokenizer ids of every line ([CLS] ... [SEP], truncated
                             to 256 = sentence_bert_config.json max_seq_length), concatenated
      offsets  I64 [N+1]     line i's ids are ids[offsets[i]:offsets[i+1]]
  tests/fixtures/bert/embeddings.safetensors
      embeddings F32 [N, 384]  sentence-transformers' encode() (float32, batch 32, normalised)
      lp_err     F64 [N]       max |float32 encode - float64 encode| per line (the R1 error scale)
  tests/fixtures/bert/hidden.safetensors
      for each of HIDDEN_LINES (index k): ids.k I64 [T]; hidden.k F32 [layers+1, T, 384] =
      transformers' output_hidden_states run in float64 (ref_hp), rounded to float32 to halve the file (a
      relative 6e-8, far under the tolerance); lp_err.k F64 [layers+1] =
      max |float32 run - float64 run| per layer, so the C++ test applies R1 per layer:
      max|qkv - hidden| <= 2 * lp_err + 1e-5. HIDDEN_LINES is one line, 0-based index 21 (the 22nd, 14
      tokens), so the file holds ids.0, hidden.0 [7, 14, 384] and lp_err.0 only (metadata
      "lines": "21"; ~300 KB). It used to hold three lines (1, 21, 30: 8, 14 and 15 tokens,
      ~800 KB); one is enough for the per-layer check, and the middle length was kept.

Usage: HF_HUB_OFFLINE=1 /root/qkv-venv/bin/python tests/reference/make_bert_fixtures.py [MODEL_DIR]
The script checks the fast tokenizer against the slow (pure Python) BertTokenizer and fails if
they disagree on any line.
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from transformers import AutoModel, BertTokenizer, BertTokenizerFast  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "bert")
MAX_LEN = 256
# Lines of sentences.txt (0-based) whose per-layer hidden states are stored, computed in float64 and
# stored as float32 (7 x T x 384 x 4 bytes each): only line 21 (14 tokens), the middle length of the former 1, 21, 30, to keep the file small.
HIDDEN_LINES = [21]


def read_lines(path):
    data = open(path, "rb").read()
    assert data.endswith(b"\n"), "sentences.txt must end with a newline"
    return [b.decode("utf-8") for b in data[:-1].split(b"\n")]


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    lines = read_lines(os.path.join(OUT, "sentences.txt"))
    print(f"{len(lines)} lines")

    fast = BertTokenizerFast.from_pretrained(model_dir)
    slow = BertTokenizer.from_pretrained(model_dir)
    ids, offsets = [], [0]
    for i, s in enumerate(lines):
        a = fast(s, truncation=True, max_length=MAX_LEN)["input_ids"]
        b = slow(s, truncation=True, max_length=MAX_LEN)["input_ids"]
        if a != b:
            raise SystemExit(f"line {i + 1}: fast and slow tokenizers disagree:\n{a}\n{b}")
        ids += a
        offsets.append(len(ids))
    lens = np.diff(offsets)
    assert lens.max() == MAX_LEN, "sentences.txt needs a line longer than 256 tokens"
    save_file({"ids": np.array(ids, np.int64), "offsets": np.array(offsets, np.int64)},
              os.path.join(OUT, "tokens.safetensors"))

    st = SentenceTransformer(model_dir, device="cpu")
    assert st.max_seq_length == MAX_LEN, st.max_seq_length
    emb = st.encode(lines, batch_size=32, convert_to_numpy=True, normalize_embeddings=False)
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5), "modules.json should end in Normalize"
    st64 = SentenceTransformer(model_dir, device="cpu").to(torch.float64)
    emb64 = st64.encode(lines, batch_size=32, convert_to_numpy=True).astype(np.float64)
    lp_err = np.abs(emb.astype(np.float64) - emb64).max(axis=1)
    print(f"embeddings: max float32 error {lp_err.max():.3g}")
    save_file({"embeddings": emb, "lp_err": lp_err}, os.path.join(OUT, "embeddings.safetensors"))

    m32 = AutoModel.from_pretrained(model_dir).eval()
    m64 = AutoModel.from_pretrained(model_dir, dtype=torch.float64).eval()
    out = {}
    for k, li in enumerate(HIDDEN_LINES):
        t = torch.tensor([ids[offsets[li]:offsets[li + 1]]])
        with torch.no_grad():
            h32 = torch.stack(m32(input_ids=t, output_hidden_states=True).hidden_states)[:, 0]
            h64 = torch.stack(m64(input_ids=t, output_hidden_states=True).hidden_states)[:, 0]
        err = (h32.double() - h64).abs().amax(dim=(1, 2))
        out[f"ids.{k}"] = t[0].numpy().astype(np.int64)
        out[f"hidden.{k}"] = np.ascontiguousarray(h64.float().numpy())  # computed in float64, stored as float32
        out[f"lp_err.{k}"] = err.numpy()
        print(f"hidden line {li + 1}: {t.shape[1]} tokens, fp32 err per layer {err.numpy()}")
        # The model's own pooling agrees with sentence-transformers' embedding.
        pooled = torch.nn.functional.normalize(h32[-1].mean(0), dim=0).numpy()
        assert np.abs(pooled - emb[li]).max() < 1e-5
    save_file(out, os.path.join(OUT, "hidden.safetensors"),
              metadata={"lines": ",".join(str(i) for i in HIDDEN_LINES)})
    for f in ("tokens", "embeddings", "hidden"):
        p = os.path.join(OUT, f + ".safetensors")
        print(f"{p}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
