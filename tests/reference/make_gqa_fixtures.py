#!/usr/bin/env python3
"""PyTorch fixtures for grouped-query attention (F.scaled_dot_product_attention's
enable_gqa=True) and the sliding window, read by tests/nn/test_parity_ops.cpp.

Run (from any directory):

    /root/qkv-venv/bin/python tests/reference/make_gqa_fixtures.py

Writes tests/fixtures/sdpa_gqa.safetensors and sdpa_gqa_window.safetensors (float64, the
naming of make_fixtures.py: in.*, out.*, grad_out.*, grad.in.*) and its block of
tests/reference/fixture_index.md (`<!-- BEGIN sdpa_gqa -->`; make_fixtures.py keeps it).

- sdpa_gqa: q [2,6,5,8] on k [2,2,7,8], v [2,2,7,4] (3 query heads per key/value head), no
  mask. out.output is PyTorch's SDPA with enable_gqa=True; its backward gives dk, dv with the
  key/value heads' shapes (summed over the query heads sharing them). Checked against the same
  SDPA on k, v repeated per query head (repeat_interleave on dim -3).
- sdpa_gqa_window: q [1,4,6,8] on k, v [1,1,9,8] (multi-query), a bottom-right causal mask with
  a sliding window of 3 (query position t = i + Lk - Lq sees keys t - 3 < j <= t), given to
  PyTorch as a boolean keep mask (in.mask [6,9]): PyTorch's SDPA has no window option, so the
  mask is built here from Mistral's rule (keys j <= t with t - j < sliding_window).

Byte-identical on re-run with the same torch build (fixed seeds, one thread, float64).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (helpers: save_fixture, backward, leaf, close; sets float64, 1 thread)

SEEDS = {"sdpa_gqa": 2101, "sdpa_gqa_window": 2102}


def sdpa_gqa_case(name, B, H, Hkv, Lq, Lk, D, Dv, keep, description, test, cfg_extra):
    torch.manual_seed(SEEDS[name])
    q = mf.leaf(torch.randn(B, H, Lq, D))
    k = mf.leaf(torch.randn(B, Hkv, Lk, D))
    v = mf.leaf(torch.randn(B, Hkv, Lk, Dv))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
    assert out.shape == (B, H, Lq, Dv)
    # The same attention with the shared heads copied per query head.
    G = H // Hkv
    k2, v2 = mf.leaf(k.detach()), mf.leaf(v.detach())
    out2 = F.scaled_dot_product_attention(q.detach(), k2.repeat_interleave(G, -3), v2.repeat_interleave(G, -3),
                                          attn_mask=keep)
    mf.close(out, out2, what=name + " enable_gqa vs repeated heads")
    t = {"in.q": q, "in.k": k, "in.v": v}
    if keep is not None:
        t["in.mask"] = keep
    t["out.output"] = out
    grads = mf.backward({"output": out}, {"q": q, "k": k, "v": v}, {})
    g2 = torch.autograd.grad((out2 * grads["grad_out.output"]).sum(), (k2, v2))
    mf.close(g2[0], grads["grad.in.k"], what=name + " dk vs repeated heads")
    mf.close(g2[1], grads["grad.in.v"], what=name + " dv vs repeated heads")
    assert grads["grad.in.k"].shape == k.shape and grads["grad.in.v"].shape == v.shape
    t.update(grads)
    cfg = {"B": B, "H": H, "H_kv": Hkv, "Lq": Lq, "Lk": Lk, "D": D, "Dv": Dv, "scale": 1.0 / D ** 0.5,
           "enable_gqa": True, "loss_uses": ["output"]}
    cfg.update(cfg_extra)
    mf.save_fixture(name, t, cfg, description, test)


def case_sdpa_gqa():
    sdpa_gqa_case("sdpa_gqa", 2, 6, 2, 5, 7, 8, 4, None,
                  "F.scaled_dot_product_attention(q, k, v, enable_gqa=True) with 6 query heads on 2 key/value heads "
                  "(query head h uses key/value head h // 3), Dv 4 != D 8, no mask",
                  "scaled_dot_product_attention(in.q, in.k, in.v, Mask(), {.enable_gqa = true}) -> out.output "
                  "[2,6,5,4]; backward with grad_out.output -> grad.in.q, grad.in.k [2,2,7,8], grad.in.v [2,2,7,4].",
                  {})


def case_sdpa_gqa_window():
    Lq, Lk, W = 6, 9, 3
    t = torch.arange(Lq)[:, None] + (Lk - Lq)  # query positions (bottom-right aligned)
    j = torch.arange(Lk)[None, :]
    keep = (j <= t) & (t - j < W)
    assert keep.sum(-1).tolist() == [3] * Lq  # every row sees exactly W keys here
    sdpa_gqa_case("sdpa_gqa_window", 1, 4, 1, Lq, Lk, 8, 8, keep,
                  "multi-query attention (4 query heads on 1 key/value head, enable_gqa=True) with a bottom-right "
                  "causal mask and a sliding window of 3 given as the bool keep mask in.mask [6,9] "
                  "(query position t = i + 3 sees keys t - 3 < j <= t)",
                  "scaled_dot_product_attention(in.q, in.k, in.v, Mask::causal(), {.enable_gqa = true, "
                  ".sliding_window = 3}) -> out.output; backward -> grad.in.q, grad.in.k, grad.in.v.",
                  {"sliding_window": W, "causal_alignment": "bottom_right"})


INDEX_BLOCK = "sdpa_gqa"


def main() -> int:
    mf.INDEX.clear()
    case_sdpa_gqa()
    case_sdpa_gqa_window()
    lines = ["## Grouped-query attention and sliding window (`make_gqa_fixtures.py`)", ""]
    for e in mf.INDEX:
        lines.append(f"### `{e['name']}.safetensors` ({e['bytes']} bytes)\n")
        lines.append(f"{e['description']}.\n")
        lines.append(f"- **Test:** {e['test']}")
        lines.append(f"- config: `{e['config']}`")
        for n, dtype, shape in e["tensors"]:
            lines.append(f"- `{n}` {dtype} {shape}")
        lines.append("")
    from make_gpt2_fixtures import replace_index_block  # the same index file and block convention
    replace_index_block(INDEX_BLOCK, "\n".join(lines))
    for e in mf.INDEX:
        print(f"{e['bytes']:8d}  tests/fixtures/{e['name']}.safetensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
