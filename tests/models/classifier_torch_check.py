"""Reads a qkv classifier checkpoint with PyTorch's safetensors package, loads
the model tensors by name (strict) into the PyTorch reference
TinyTextClassifier of tests/reference/make_fixtures.py and compares its eval
logits on extra.probe_tokens with qkv's (extra.probe_logits).

usage: classifier_torch_check.py CHECKPOINT REPO_ROOT     exit 0 = match
"""
import json
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file

path, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, root + "/tests/reference")
from make_fixtures import TinyTextClassifier  # noqa: E402

tensors = load_file(path)
with safe_open(path, framework="pt") as f:
    meta = f.metadata()
assert meta["format"] == "qkv-checkpoint-v2", meta
assert meta["model_type"] == "classifier", meta
cfg = json.loads(meta["config"])
model_sd = {k: v for k, v in tensors.items() if not k.startswith(("optim.", "extra."))}
m = TinyTextClassifier(vocab_size=cfg["vocab_size"], d_model=cfg["d_model"], nhead=cfg["num_heads"],
                       dim_feedforward=cfg["d_ff"], num_layers=cfg["num_layers"],
                       num_classes=cfg["num_classes"], max_len=cfg["max_len"])
m.load_state_dict(model_sd, strict=True)  # same names, same shapes, nothing missing or extra
m.eval()
with torch.no_grad():
    logits = m(tensors["extra.probe_tokens"])
want = tensors["extra.probe_logits"]
diff = (logits - want).abs().max().item()
print(f"tensors {len(tensors)}, model {len(model_sd)}, max |logits diff| {diff:.3g}")
# float32 through two encoder layers, different summation orders: measured ~1e-6.
sys.exit(0 if diff < 1e-4 else 1)
