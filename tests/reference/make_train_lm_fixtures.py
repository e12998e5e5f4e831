#!/usr/bin/env python3
"""Reference for qkv's language-model training step (tests/train/test_lm_parity.cpp).

A tiny GPT-2 (transformers' GPT2LMHeadModel, its own initialisation from
torch.manual_seed(0)) takes two optimiser steps as `qkv train lm` takes them:

  loss  = F.cross_entropy(logits.view(B*T, V), targets.view(B*T))      (mean nats/token)
  loss.backward(); clip_grad_norm_(params, 1.0)
  AdamW(lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1 on parameters of rank >= 2,
        0 on the rest; foreach=False), constant learning rate

Written to tests/fixtures/train_lm/ (transformers' names, Conv1D layout, as save_gpt2 writes):
  config.json, model.safetensors        the initial model (save_pretrained)
  steps.safetensors                     ids{1,2}, targets{1,2} (I64 [B, T]);
                                        loss{1,2}, grad_norm{1,2} (F64 []);
                                        grad1.<name> (the first step's gradients, before clipping);
                                        step{1,2}.<name> (the parameters after each step)
Run:  /root/qkv-venv/bin/python tests/reference/make_train_lm_fixtures.py
With --check-qkv-dir DIR it instead loads a folder written by `qkv train lm` with
GPT2LMHeadModel.from_pretrained (the loading report must be clean) and checks that
transformers' greedy continuation of --prompt-ids equals `qkv generate`'s token for
token (it prints the smallest top-2 logit margin on the path, so a match is not luck).
"""
import argparse
import os

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "train_lm")


def make():
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=63, eos_token_id=63)
    model = GPT2LMHeadModel(cfg)
    model.train()  # dropout is 0: train mode changes nothing
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)

    B, T, V = 4, 16, cfg.vocab_size
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)) for _ in range(2)]
    named = [(n, p) for n, p in model.named_parameters()]
    decay = [p for n, p in named if p.dim() >= 2]
    no_decay = [p for n, p in named if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    out = {}
    sd_names = {id(p): n for n, p in named}
    for k, (ids, tgt) in enumerate(batches, start=1):
        opt.zero_grad()
        logits = model(ids).logits
        loss = F.cross_entropy(logits.reshape(B * T, V), tgt.reshape(B * T))
        loss.backward()
        if k == 1:
            for n, p in named:
                out["grad1." + n] = p.grad.detach().clone().contiguous()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
        opt.step()
        out[f"ids{k}"] = ids
        out[f"targets{k}"] = tgt
        out[f"loss{k}"] = torch.tensor(loss.item(), dtype=torch.float64)
        out[f"grad_norm{k}"] = torch.tensor(norm.item(), dtype=torch.float64)
        for n, p in named:
            out[f"step{k}." + n] = p.detach().clone().contiguous()
    save_file(out, os.path.join(OUT, "steps.safetensors"), metadata={"source": "make_train_lm_fixtures.py"})
    print("wrote", OUT, "loss", out["loss1"].item(), out["loss2"].item())


def check_qkv_dir(d, qkv, prompt_ids, n_new):
    """transformers loads the folder cleanly and continues the prompt greedily with the same tokens as qkv."""
    import json
    import subprocess
    model, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise SystemExit(f"transformers' loading report for {d} is not clean: {bad}")
    model.eval()
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n_new,
                             min_new_tokens=n_new, pad_token_id=0)[0, len(prompt_ids):].tolist()
        logits = model(torch.tensor([prompt_ids + ref])).logits[0]
    top2 = logits.topk(2, dim=-1).values
    margin = (top2[len(prompt_ids) - 1:-1, 0] - top2[len(prompt_ids) - 1:-1, 1]).min().item()
    out = subprocess.run([qkv, "generate", "--model", d, "--prompt-ids", ",".join(map(str, prompt_ids)),
                          "--max-new", str(n_new), "--json"], check=True, capture_output=True, text=True).stdout
    got = json.loads(out.splitlines()[0])["new_ids"]
    # qkv stops at <|endoftext|>; transformers was told not to: compare up to qkv's end.
    same = got == ref[:len(got)]
    print(f"transformers loaded {d} cleanly; greedy {len(got)} tokens: {'identical' if same else 'DIFFERENT'} "
          f"(smallest top-2 logit margin on the path {margin:.3g})")
    if not same:
        raise SystemExit(f"qkv {got}\nhf  {ref}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-qkv-dir", help="a folder written by qkv train lm")
    ap.add_argument("--qkv", default=os.path.join(HERE, "..", "..", "build", "tools", "qkv", "qkv"))
    ap.add_argument("--prompt-ids", default="464,1578,286", help="comma-separated prompt ids")
    ap.add_argument("--new", type=int, default=48)
    a = ap.parse_args()
    if a.check_qkv_dir:
        check_qkv_dir(a.check_qkv_dir, a.qkv, [int(x) for x in a.prompt_ids.split(",")], a.new)
    else:
        make()
