"""Opt-in checks against PyTorch itself: they run where torch is importable (CI installs no torch).

    /root/qkv-venv/bin/python -m pytest python/tests/test_torch.py     # a venv with torch
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qkv

torch = pytest.importorskip("torch")
F = torch.nn.functional


def randn(*shape: int, dtype: "torch.dtype" = torch.float32) -> "torch.Tensor":
    g = torch.Generator().manual_seed(sum(shape) * 7919 + len(shape))
    return torch.randn(*shape, generator=g, dtype=dtype)


def test_zero_copy_both_ways() -> None:
    x = randn(2, 3, 4)
    t = qkv.asarray(x)
    assert t.data_ptr() == x.data_ptr()
    back = torch.from_dlpack(t)
    assert back.data_ptr() == x.data_ptr() and back.dtype == torch.float32
    y = qkv.softmax(x, -1)
    assert isinstance(y, torch.Tensor)
    # the result is torch's view of qkv's memory: torch.from_dlpack of it is the same memory again
    assert torch.from_dlpack(y).data_ptr() == y.data_ptr()
    # non-contiguous torch views are read in place too
    v = randn(4, 6, 8).transpose(0, 2)
    assert qkv.asarray(v).data_ptr() == v.data_ptr()
    torch.testing.assert_close(qkv.softmax(v, 0), torch.softmax(v, 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sdpa_matches_torch(dtype: "torch.dtype") -> None:
    tol = dict(atol=2e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
    q, k, v = randn(2, 4, 37, 32, dtype=dtype), randn(2, 4, 53, 32, dtype=dtype), randn(2, 4, 53, 24, dtype=dtype)
    torch.testing.assert_close(qkv.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), **tol)
    # is_causal with L != S: top-left, as torch
    torch.testing.assert_close(qkv.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2), **tol)
    keep = torch.rand(2, 1, 37, 53, generator=torch.Generator().manual_seed(1)) > 0.3
    torch.testing.assert_close(qkv.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=keep), **tol)
    bias = randn(37, 53, dtype=dtype)
    torch.testing.assert_close(qkv.scaled_dot_product_attention(q, k, v, attn_mask=bias),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=bias), **tol)


def test_grouped_query_attention_matches_torch() -> None:
    q, k, v = randn(2, 12, 33, 32), randn(2, 4, 47, 32), randn(2, 4, 47, 32)
    for causal in (False, True):
        torch.testing.assert_close(qkv.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
                                   atol=2e-6, rtol=1e-5)


def test_norms_and_rotary_match_torch() -> None:
    x, w, b = randn(3, 5, 64), randn(64), randn(64)
    torch.testing.assert_close(qkv.layer_norm(x, 64, w, b), F.layer_norm(x, (64,), w, b))
    torch.testing.assert_close(qkv.rms_norm(x, 64, w, eps=1e-6), F.rms_norm(x, (64,), w, eps=1e-6))
    torch.testing.assert_close(qkv.rms_norm(x, (5, 64)), F.rms_norm(x, (5, 64)))
    torch.testing.assert_close(qkv.softmax(x, 1), torch.softmax(x, 1))
    # RoPE as transformers' Llama computes it (rotate_half, float32 inv_freq and angles)
    D, T = 64, 5
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    pos = torch.tensor([0, 3, 9, 100, 2047])
    freqs = pos[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos(), emb.sin()
    rot_half = lambda t: torch.cat((-t[..., D // 2:], t[..., : D // 2]), -1)  # noqa: E731
    ref = x * cos + rot_half(x) * sin
    torch.testing.assert_close(qkv.apply_rotary_emb(x, pos), ref, atol=2e-6, rtol=1e-5)


def test_multi_head_attention_as_the_tutorial_module() -> None:
    E, H = 32, 4
    lin = [torch.nn.Linear(E, E) for _ in range(4)]
    x = randn(2, 9, E)
    with torch.no_grad():
        def heads(t: "torch.Tensor") -> "torch.Tensor":
            return t.view(2, -1, H, E // H).transpose(1, 2)

        o = F.scaled_dot_product_attention(heads(lin[0](x)), heads(lin[1](x)), heads(lin[2](x)), is_causal=True)
        ref = lin[3](o.transpose(1, 2).reshape(2, 9, E))
        args = [p.detach() for m in lin for p in (m.weight,)] + [m.bias.detach() for m in lin]
        out = qkv.multi_head_attention(x, x, x, H, *args, is_causal=True)
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)


def test_torch_specific_errors_and_conversions() -> None:
    with pytest.raises(TypeError, match="requires grad; qkv does not record torch's autograd: pass x.detach"):
        qkv.softmax(randn(3).requires_grad_())
    h = randn(4, 8).to(torch.bfloat16)
    y = qkv.softmax(h)
    assert y.dtype == torch.float32  # converted (a copy), as the docstring says
    torch.testing.assert_close(y, torch.softmax(h.float(), -1))


def test_embeddings_match_sentence_transformers(minilm: Path) -> None:
    st = pytest.importorskip("sentence_transformers")
    texts = ["A man is eating food.", "The girl is carrying a baby.", "Attention is all you need.", ""]
    ref = st.SentenceTransformer(str(minilm), device="cpu").encode(texts, normalize_embeddings=True)
    ours = qkv.Embedder(minilm).encode(texts)
    np.testing.assert_allclose(ours, ref, atol=2e-6)
    t = qkv.Embedder(minilm).encode(texts, convert_to_tensor=True)
    assert isinstance(t, torch.Tensor) and t.shape == (4, 384)
