"""The functional ops against NumPy references and the repository's PyTorch fixtures; bad arguments."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from conftest import load_safetensors

import qkv

RNG = np.random.default_rng(1234)


def randn(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def sdpa_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
             causal: bool = False, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's semantics in float64: bool mask True = attend, float mask added, is_causal top-left."""
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    s = q64 @ np.swapaxes(k64, -1, -2) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    if causal:
        L, S = s.shape[-2:]
        s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    z = e.sum(-1, keepdims=True)
    w = np.where(z > 0, e / np.where(z > 0, z, 1), 0)  # fully masked rows give 0
    return w @ v64, w


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("shape", [(1, 8, 128, 64), (2, 3, 5, 7, 16), (33, 21)])
def test_sdpa_matches_numpy(dtype: Any, tol: float, shape: tuple[int, ...]) -> None:
    q, k, v = (randn(*shape, dtype=dtype) for _ in range(3))
    out = qkv.scaled_dot_product_attention(q, k, v)
    assert out.dtype == dtype and out.shape == shape
    np.testing.assert_allclose(out, sdpa_ref(q, k, v)[0], atol=tol, rtol=0)
    out = qkv.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    np.testing.assert_allclose(out, sdpa_ref(q, k, v, causal=True, scale=0.3)[0], atol=tol, rtol=0)


def test_sdpa_masks_as_torch() -> None:
    B, H, L, S, D = 2, 3, 7, 11, 16
    q, k, v = randn(B, H, L, D), randn(B, H, S, D), randn(B, H, S, 5)
    keep = RNG.random((B, 1, L, S)) > 0.4
    keep[1, 0, 3] = False  # a fully masked row: zeros, not NaN
    out, w = qkv.scaled_dot_product_attention(q, k, v, attn_mask=keep, need_weights=True)
    ref, wref = sdpa_ref(q, k, v, keep)
    np.testing.assert_allclose(out, ref, atol=2e-6)
    np.testing.assert_allclose(w, wref, atol=2e-6)
    assert (out[1, :, 3] == 0).all() and (w[1, :, 3] == 0).all()
    np.testing.assert_allclose(qkv.scaled_dot_product_attention(q, k, v, attn_mask=keep), ref, atol=2e-6)
    bias = randn(L, S)
    bias[2, :4] = -np.inf
    np.testing.assert_allclose(qkv.scaled_dot_product_attention(q, k, v, attn_mask=bias),
                               sdpa_ref(q, k, v, bias)[0], atol=2e-6)
    # is_causal with L != S is top-left aligned, as torch; it combines with a mask
    np.testing.assert_allclose(qkv.scaled_dot_product_attention(q, k, v, is_causal=True),
                               sdpa_ref(q, k, v, causal=True)[0], atol=2e-6)
    qs = randn(B, H, S, D)
    np.testing.assert_allclose(qkv.scaled_dot_product_attention(qs, k, v, attn_mask=bias[:1].repeat(S, 0), is_causal=True),
                               sdpa_ref(qs, k, v, bias[:1].repeat(S, 0), causal=True)[0], atol=2e-6)


def test_sdpa_grouped_query_attention() -> None:
    q, k, v = randn(2, 8, 9, 16), randn(2, 2, 13, 16), randn(2, 2, 13, 16)
    rep = lambda t: np.repeat(t, 4, axis=1)  # noqa: E731  (query head h reads kv head h // 4)
    for causal in (False, True):
        out = qkv.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        np.testing.assert_allclose(out, sdpa_ref(q, rep(k), rep(v), causal=causal)[0], atol=2e-6)
    with pytest.raises(qkv.ShapeError):
        qkv.scaled_dot_product_attention(q, k, v)  # without enable_gqa the head counts must match


def test_sdpa_dropout_is_seeded() -> None:
    q = randn(1, 2, 9, 8)
    qkv.manual_seed(3)
    a = qkv.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    qkv.manual_seed(3)
    b = qkv.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, qkv.scaled_dot_product_attention(q, q, q))


@pytest.mark.parametrize("name", ["sdpa_none", "sdpa_causal", "sdpa_keep", "sdpa_additive", "sdpa_padding"])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
def test_sdpa_matches_pytorch_fixtures(name: str, dtype: Any, tol: float) -> None:
    t, cfg = load_safetensors(name)
    q, k, v = (t[f"in.{n}"].astype(dtype) for n in "qkv")
    mask = t.get("in.mask")
    if mask is not None and mask.dtype != np.bool_:
        mask = mask.astype(dtype)
    out, w = qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask, need_weights=True)
    np.testing.assert_allclose(out, t["out.output"], atol=tol, rtol=0)
    np.testing.assert_allclose(w, t["out.weights"], atol=tol, rtol=0)
    fast = qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # the tiled kernel for float32
    np.testing.assert_allclose(fast, t["out.output"], atol=tol, rtol=0)
    for b, h, i in cfg.get("fully_masked_rows_bhq", []):
        assert (fast[b, h, i] == 0).all()


def test_sdpa_avx2_path_matches() -> None:
    q, k, v = randn(2, 4, 67, 32), randn(2, 4, 45, 32), randn(2, 4, 45, 32)
    ref = sdpa_ref(q, k, v, causal=True)[0]
    isa = qkv.get_isa()
    try:
        for cap in ("scalar", "avx2", "avx512"):
            qkv.set_isa(cap)
            np.testing.assert_allclose(qkv.scaled_dot_product_attention(q, k, v, is_causal=True), ref, atol=2e-6)
    finally:
        qkv.set_isa(isa)


def test_multi_head_attention_matches_pytorch_fixture() -> None:
    t, cfg = load_safetensors("mha_self")
    x = t["in.x"]
    p = {n: t[f"param.{n}.weight"] for n in ("w_q", "w_k", "w_v", "w_o")}
    b = {n.replace("w_", "b_"): t[f"param.{n}.bias"] for n in ("w_q", "w_k", "w_v", "w_o")}
    out, w = qkv.multi_head_attention(x, x, x, cfg["num_heads"], **p, **b, need_weights=True)
    np.testing.assert_allclose(out, t["out.output"], atol=1e-12)
    np.testing.assert_allclose(w, t["out.weights"], atol=1e-12)
    out32 = qkv.multi_head_attention(x.astype(np.float32), x.astype(np.float32), x.astype(np.float32),
                                     cfg["num_heads"], **{k: a.astype(np.float32) for k, a in {**p, **b}.items()})
    np.testing.assert_allclose(out32, t["out.output"], atol=1e-5)


def test_multi_head_attention_matches_numpy_with_mask_and_other_widths() -> None:
    B, L, S, E, H = 2, 5, 7, 12, 3
    q, k, v = randn(B, L, E), randn(B, S, 10), randn(B, S, 6)
    w_q, w_k, w_v, w_o = randn(E, E), randn(E, 10), randn(E, 6), randn(E, E)
    pad = np.ones((B, S), bool)
    pad[1, 5:] = False
    out = qkv.multi_head_attention(q, k, v, H, w_q, w_k, w_v, w_o, attn_mask=pad[:, None, None, :])
    heads = lambda x: x.reshape(B, -1, H, E // H).transpose(0, 2, 1, 3)  # noqa: E731
    o, _ = sdpa_ref(heads(q @ w_q.T), heads(k @ w_k.T), heads(v @ w_v.T), pad[:, None, None, :])
    ref = o.transpose(0, 2, 1, 3).reshape(B, L, E) @ w_o.T
    np.testing.assert_allclose(out, ref, atol=2e-5)


def test_softmax_and_layer_norm_match_pytorch_fixtures() -> None:
    t, _ = load_safetensors("softmax")
    np.testing.assert_allclose(qkv.softmax(t["in.x"], -1), t["out.softmax"], atol=1e-15)
    t, cfg = load_safetensors("layer_norm")
    y = qkv.layer_norm(t["in.x"], cfg["normalized_shape"], t["param.weight"], t["param.bias"], cfg["eps"])
    np.testing.assert_allclose(y, t["out.y"], atol=1e-14)


def test_rms_norm_matches_numpy() -> None:
    for dtype, tol in ((np.float32, 2e-6), (np.float64, 1e-14)):
        x, w = randn(3, 4, 32, dtype=dtype), randn(32, dtype=dtype)
        x64 = x.astype(np.float64)
        ref = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6) * w
        np.testing.assert_allclose(qkv.rms_norm(x, 32, w, eps=1e-6), ref, atol=tol, rtol=tol)
        eps = np.finfo(dtype).eps
        ref2 = x64 / np.sqrt((x64**2).mean((-2, -1), keepdims=True) + eps)
        np.testing.assert_allclose(qkv.rms_norm(x, (4, 32)), ref2, atol=tol, rtol=tol)


def rope_ref(x: np.ndarray, pos: np.ndarray, base: float, interleaved: bool) -> np.ndarray:
    D = x.shape[-1]
    # inv_freq in float32 as transformers computes it: 1 / float32(base ** (2i / D)), 2i / D in float32
    e = np.arange(0, D, 2, dtype=np.float32) / np.float32(D)
    inv = (np.float32(1) / (np.float64(base) ** e.astype(np.float64)).astype(np.float32)).astype(np.float64)
    ang = pos[:, None].astype(np.float64) * inv
    c, s = np.cos(ang), np.sin(ang)
    x64 = x.astype(np.float64)
    if interleaved:
        a, b = x64[..., 0::2], x64[..., 1::2]
        out = np.empty_like(x64)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
        return out
    a, b = x64[..., : D // 2], x64[..., D // 2 :]
    return np.concatenate([a * c - b * s, b * c + a * s], -1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rotary_emb_matches_numpy(interleaved: bool) -> None:
    x = randn(2, 4, 9, 16, dtype=np.float64)
    pos = np.array([0, 1, 2, 3, 10, 20, 30, 40, 1000])
    y = qkv.apply_rotary_emb(x, pos, base=500000.0, interleaved=interleaved)
    np.testing.assert_allclose(y, rope_ref(x, pos, 500000.0, interleaved), atol=1e-12)
    y0 = qkv.apply_rotary_emb(x[:, :, :3], interleaved=interleaved)  # positions 0, 1, 2
    np.testing.assert_allclose(y0, rope_ref(x[:, :, :3], np.arange(3), 10000.0, interleaved), atol=1e-12)
    # partial rotary: dims past rotary_dim are untouched
    yp = qkv.apply_rotary_emb(x, pos, rotary_dim=8, interleaved=interleaved)
    np.testing.assert_array_equal(yp[..., 8:], x[..., 8:])
    # float32 and llama3 scaling run (the scaling itself is checked in the C++ tests)
    y32 = qkv.apply_rotary_emb(x.astype(np.float32), pos, scaling={"rope_type": "llama3", "factor": 8.0,
                                                                   "original_max_position_embeddings": 64})
    assert y32.dtype == np.float32 and np.isfinite(y32).all()


def test_bad_arguments_raise_with_qkv_messages() -> None:
    q = randn(2, 3, 4, 8)
    with pytest.raises(qkv.ShapeError, match="head dim mismatch: q \\[2,3,4,8\\] has D=8 but k \\[2,3,4,5\\]"):
        qkv.scaled_dot_product_attention(q, randn(2, 3, 4, 5), q)
    with pytest.raises(ValueError):  # ShapeError is a ValueError
        qkv.scaled_dot_product_attention(q, q[:1], q)
    with pytest.raises(TypeError, match="q is float32 \\[2,3,4,8\\] but k is float64"):
        qkv.scaled_dot_product_attention(q, q.astype(np.float64), q)
    with pytest.raises(ValueError, match="dropout_p must be in \\[0, 1\\), got 1.5"):
        qkv.scaled_dot_product_attention(q, q, q, dropout_p=1.5)
    with pytest.raises(qkv.ShapeError, match="does not broadcast to the scores \\[2,3,4,4\\]"):
        qkv.scaled_dot_product_attention(q, q, q, attn_mask=np.ones((3, 3), bool))
    with pytest.raises(TypeError, match="attn_mask must be bool \\(True = attend\\) or float"):
        qkv.scaled_dot_product_attention(q, q, q, attn_mask=np.ones((4, 4), np.int64))
    with pytest.raises(TypeError, match="softmax: x must be float32 or float64, got int64 \\[4\\]"):
        qkv.softmax(np.arange(4), 0)
    with pytest.raises(IndexError):
        qkv.softmax(q, 7)
    with pytest.raises(qkv.ShapeError, match="layer_norm: normalized_shape \\[5\\] must match the trailing dims"):
        qkv.layer_norm(q, 5)
    with pytest.raises(ValueError, match="rms_norm: eps must be a finite number >= 0"):
        qkv.rms_norm(q, 8, eps=-1.0)
    with pytest.raises(ValueError, match="apply_rotary_emb: rotary_dim must be even"):
        qkv.apply_rotary_emb(q, rotary_dim=3)
    with pytest.raises(ValueError, match="scaling rope_type must be 'default', 'linear' or 'llama3', got 'yarn'"):
        qkv.apply_rotary_emb(q, scaling={"rope_type": "yarn"})
    x = randn(2, 4, 6)
    w = randn(6, 6)
    with pytest.raises(ValueError, match="embed_dim \\(d_model\\) 6 is not divisible by num_heads 4"):
        qkv.multi_head_attention(x, x, x, 4, w, w, w, w)
    with pytest.raises(qkv.ShapeError, match="w_v must be \\[6, 6\\]"):
        qkv.multi_head_attention(x, x, x, 2, w, w, w[:5], w)
    with pytest.raises(ValueError, match="set_num_threads"):
        qkv.set_num_threads(0)


def test_threads_from_python_give_the_single_thread_results() -> None:
    inputs = [tuple(randn(2, 4, 33, 16) for _ in range(3)) for _ in range(8)]
    alone = [qkv.scaled_dot_product_attention(*a, is_causal=True) for a in inputs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            together = list(pool.map(lambda a: qkv.scaled_dot_product_attention(*a, is_causal=True), inputs))
            for x, y in zip(alone, together):
                np.testing.assert_array_equal(x, y)


def test_the_gil_is_released_while_qkv_computes() -> None:
    # While a worker thread is inside one long qkv call, this thread keeps running Python code:
    # its ticks spread over the call. (Were the GIL held for the call, this thread could only run
    # once the call returned: a burst after the call's end, within one switch interval.)
    q = randn(4, 8, 1024, 64)
    window: list[float] = []
    done = threading.Event()

    def work() -> None:
        time.sleep(0.05)
        window.append(time.perf_counter())
        qkv.scaled_dot_product_attention(q, q, q)
        window.append(time.perf_counter())
        done.set()

    threads = qkv.get_num_threads()
    qkv.set_num_threads(1)
    ticks: list[float] = []
    try:
        t = threading.Thread(target=work)
        t.start()
        while not done.is_set():
            ticks.append(time.perf_counter())
        t.join()
    finally:
        qkv.set_num_threads(threads)
    t0, t1 = window
    inside = [x for x in ticks if t0 < x < t1]
    assert inside, "no Python ran during the call"
    assert max(inside) - min(inside) > 0.5 * (t1 - t0)
