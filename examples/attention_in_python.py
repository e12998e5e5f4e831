"""Attention in Python with qkv, next to NumPy: the tutorial's worked d_k = 2 example and its
shape walkthrough, cell by cell (runnable as a script or pasted into a notebook).

    pip install .                                  # from the qkv repository
    python examples/attention_in_python.py         # --out heatmap.png (needs matplotlib)

Every qkv call below takes NumPy arrays as they are (no copy) and returns NumPy arrays.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import numpy.typing as npt

import qkv

Array = npt.NDArray[np.float64]


def softmax_np(x: Array) -> Array:
    e = np.exp(x - x.max(-1, keepdims=True))
    return np.asarray(e / e.sum(-1, keepdims=True))


def show(title: str, a: npt.NDArray[Any]) -> None:
    print(f"{title} {a.shape}")
    print(np.array2string(a, precision=3, suppress_small=True), "\n")


# %% 1. The worked example: d_k = 2, three queries and three keys ------------------------------
def worked_example() -> Array:
    q = np.array([[0.1, 0.2], [0.5, 0.6], [0.9, 1.0]])
    k = np.array([[0.3, 0.4], [0.7, 0.8], [1.1, 1.2]])
    d_k = q.shape[-1]

    scores = q @ k.T  # (3, 2) @ (2, 3) -> (3, 3)
    scaled = scores / np.sqrt(d_k)
    weights_np = softmax_np(scaled)
    show("NumPy: scores Q K^T", scores)
    show("NumPy: scaled scores Q K^T / sqrt(d_k)", scaled)
    show("NumPy: weights softmax(scaled)", weights_np)

    # qkv computes the same weights in one call; with V = I the output equals the weights.
    out, weights = qkv.scaled_dot_product_attention(q, k, np.eye(3), need_weights=True)
    show("qkv:   weights", weights)
    print("tutorial (rounds intermediates): [[0.305 0.333 0.362] [0.237 0.323 0.440] [0.177 0.303 0.520]]")
    print(f"max |qkv - NumPy| = {np.abs(weights - weights_np).max():.2e}; output == weights: "
          f"{np.allclose(out, weights)}\n")
    assert np.allclose(weights, weights_np, atol=1e-12)
    return weights


# %% 2. The shape walkthrough: "[CLS] I love NLP [SEP]", d_model 512, 8 heads -------------------
def positional_encoding(length: int, d_model: int) -> Array:
    pos = np.arange(length)[:, None]
    i = np.arange(0, d_model, 2)[None, :]
    pe = np.zeros((length, d_model))
    pe[:, 0::2] = np.sin(pos / 10000 ** (i / d_model))
    pe[:, 1::2] = np.cos(pos / 10000 ** (i / d_model))
    return pe


def shape_walkthrough() -> Array:
    rng = np.random.default_rng(0)
    tokens = ["[CLS]", "I", "love", "NLP", "[SEP]"]
    B, L, d_model, H = 1, len(tokens), 512, 8
    d_k = d_model // H  # 64

    x = rng.standard_normal((B, L, d_model)) * 0.1 + positional_encoding(L, d_model)  # embeddings + PE
    w = {n: rng.standard_normal((d_model, d_model)) / np.sqrt(d_model) for n in ("w_q", "w_k", "w_v", "w_o")}
    print(f"tokens {tokens}: x = embedding + positional encoding {x.shape}")

    # NumPy, step by step (nn.Linear layout: y = x @ W.T)
    q, k, v = (x @ w[n].T for n in ("w_q", "w_k", "w_v"))  # (1, 5, 512) each

    def heads(t: Array) -> Array:
        return np.asarray(t.reshape(B, L, H, d_k).transpose(0, 2, 1, 3), dtype=np.float64)

    qh, kh, vh = heads(q), heads(k), heads(v)  # (1, 8, 5, 64)
    scores = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(d_k)  # (1, 8, 5, 5)
    attn = softmax_np(scores)
    context = attn @ vh  # (1, 8, 5, 64)
    concat = context.transpose(0, 2, 1, 3).reshape(B, L, d_model)  # (1, 5, 512)
    out_np = concat @ w["w_o"].T
    for name, a in [("Q = x W_Q^T", q), ("Q split into heads", qh), ("scores Q K^T / sqrt(d_k)", scores),
                    ("weights softmax(scores)", attn), ("context weights V", context),
                    ("heads concatenated", concat), ("output concat W_O^T", out_np)]:
        print(f"  {name:<28} {a.shape}")

    # qkv: the same multi-head attention in one call, the per-head weights on request
    out, weights = qkv.multi_head_attention(x, x, x, H, w["w_q"], w["w_k"], w["w_v"], w["w_o"], need_weights=True)
    print(f"qkv.multi_head_attention -> output {out.shape}, weights {weights.shape}; "
          f"max |qkv - NumPy| = {np.abs(out - out_np).max():.2e}")
    assert np.allclose(out, out_np, atol=1e-10) and np.allclose(weights, attn, atol=1e-12)

    # Add & Norm, as the encoder block does it
    y = qkv.layer_norm(x + out, d_model)
    print(f"Add & Norm: layer_norm(x + attention) {y.shape}, mean {y.mean():.1e}, std {y.std():.3f}")

    # The same call in float32 runs qkv's tiled kernel; a causal mask hides the future
    x32 = x.astype(np.float32)
    w32 = [w[n].astype(np.float32) for n in ("w_q", "w_k", "w_v", "w_o")]
    causal, cw = qkv.multi_head_attention(x32, x32, x32, H, *w32, is_causal=True, need_weights=True)
    print(f"float32, is_causal: output {causal.dtype} {causal.shape}; head 0's weights above the diagonal "
          f"are all 0: {bool((np.triu(cw[0, 0], 1) == 0).all())}\n")
    return np.asarray(weights[0, 0])


# %% 3. A heatmap of the weights (matplotlib, when installed) --------------------------------
def heatmap(worked: Array, head0: Array, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no heatmap (pip install matplotlib)")
        return
    tokens = ["[CLS]", "I", "love", "NLP", "[SEP]"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    panels = [(axes[0], worked, "worked example (d_k = 2)", ["q0", "q1", "q2"], ["k0", "k1", "k2"]),
              (axes[1], head0, "walkthrough, head 0", tokens, tokens)]
    for ax, m, title, rows, cols in panels:
        im = ax.imshow(m, cmap="viridis", vmin=0)
        ax.set_title(title)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_xticks(range(len(cols)), cols, rotation=45)
        ax.set_yticks(range(len(rows)), rows)
        for (i, j), val in np.ndenumerate(m):
            ax.text(j, i, f"{val:.2f}", ha="center", va="center", fontsize=8,
                    color="k" if val > 0.6 * m.max() else "w")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="attention_heatmap.png", help="heatmap PNG (needs matplotlib)")
    args = parser.parse_args()
    worked = worked_example()
    head0 = shape_walkthrough()
    heatmap(worked, head0, args.out)


if __name__ == "__main__":
    main()
