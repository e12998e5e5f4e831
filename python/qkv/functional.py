"""Attention and normalisation ops with PyTorch's names and semantics, on NumPy and torch arrays.

Every function takes NumPy arrays, CPU torch tensors or :class:`qkv.Tensor` (and, for
convenience, Python sequences) and returns its results as the same kind of array as its first
argument: NumPy in, NumPy out; torch in, torch out. float32 and float64 arrays of any strides are
read where they lie (no copy); other dtypes are converted first (float16/bfloat16 -> float32, a
copy). The results view qkv's memory (no copy on the way out either). The GIL is released while
qkv computes.

Errors carry qkv's messages: :class:`qkv.ShapeError` (a ``ValueError``) for shapes that do not
fit, ``TypeError`` for dtypes, ``ValueError`` for values out of range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast, overload

from . import _qkv
from ._types import ArrayT

__all__ = [
    "scaled_dot_product_attention",
    "multi_head_attention",
    "softmax",
    "layer_norm",
    "rms_norm",
    "apply_rotary_emb",
]


@overload
def scaled_dot_product_attention(
    query: ArrayT,
    key: Any,
    value: Any,
    attn_mask: Any | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    need_weights: Literal[False] = False,
) -> ArrayT: ...
@overload
def scaled_dot_product_attention(
    query: ArrayT,
    key: Any,
    value: Any,
    attn_mask: Any | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    need_weights: Literal[True],
) -> tuple[ArrayT, ArrayT]: ...
@overload
def scaled_dot_product_attention(
    query: ArrayT,
    key: Any,
    value: Any,
    attn_mask: Any | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    need_weights: bool,
) -> ArrayT | tuple[ArrayT, ArrayT]: ...
def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    need_weights: bool = False,
) -> Any:
    """``softmax(query @ key.T * scale + mask) @ value``, as ``torch.nn.functional.scaled_dot_product_attention``.

    Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)`` -> ``(..., L, Ev)``,
    with equal leading dims (batch, heads). float32 runs qkv's FlashAttention-style tiled kernel;
    float64 (and ``need_weights``) the exact math path.

    Args:
        attn_mask: broadcastable to ``(..., L, S)``. A bool mask says which keys each query may
            attend (True = attend, as torch); a float mask is added to the scores (``-inf``
            blocks). A query row with no allowed key gives zeros, never NaN.
        dropout_p: dropout on the attention weights, applied whenever > 0 (as torch's functional
            form; seed it with :func:`qkv.manual_seed`).
        is_causal: query ``i`` attends keys ``j <= i`` (top-left aligned when L != S, as torch);
            combines with ``attn_mask``.
        scale: defaults to ``1 / sqrt(E)``.
        enable_gqa: grouped-query attention, as torch: key and value may have fewer heads
            ``(..., Hkv, S, E)`` than query ``(..., H, L, E)`` (Hkv dividing H); query head h
            reads key/value head ``h // (H // Hkv)``, in place (no repeat).
        need_weights: also return the attention weights ``(..., L, S)`` (after masking and
            softmax, before dropout) for heatmaps: ``(output, weights)``.
    """
    return _qkv._scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, need_weights
    )


@overload
def multi_head_attention(
    query: ArrayT,
    key: Any,
    value: Any,
    num_heads: int,
    w_q: Any,
    w_k: Any,
    w_v: Any,
    w_o: Any,
    b_q: Any | None = None,
    b_k: Any | None = None,
    b_v: Any | None = None,
    b_o: Any | None = None,
    *,
    attn_mask: Any | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: Literal[False] = False,
) -> ArrayT: ...
@overload
def multi_head_attention(
    query: ArrayT,
    key: Any,
    value: Any,
    num_heads: int,
    w_q: Any,
    w_k: Any,
    w_v: Any,
    w_o: Any,
    b_q: Any | None = None,
    b_k: Any | None = None,
    b_v: Any | None = None,
    b_o: Any | None = None,
    *,
    attn_mask: Any | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: Literal[True],
) -> tuple[ArrayT, ArrayT]: ...
@overload
def multi_head_attention(
    query: ArrayT,
    key: Any,
    value: Any,
    num_heads: int,
    w_q: Any,
    w_k: Any,
    w_v: Any,
    w_o: Any,
    b_q: Any | None = None,
    b_k: Any | None = None,
    b_v: Any | None = None,
    b_o: Any | None = None,
    *,
    attn_mask: Any | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool,
) -> ArrayT | tuple[ArrayT, ArrayT]: ...
def multi_head_attention(
    query: Any,
    key: Any,
    value: Any,
    num_heads: int,
    w_q: Any,
    w_k: Any,
    w_v: Any,
    w_o: Any,
    b_q: Any | None = None,
    b_k: Any | None = None,
    b_v: Any | None = None,
    b_o: Any | None = None,
    *,
    attn_mask: Any | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> Any:
    """Multi-head attention with the tutorial's four projections ``W_q, W_k, W_v, W_o``.

    ``Q = query @ w_q.T + b_q`` split into ``num_heads`` heads ``(B, H, L, E/H)`` (likewise K and
    V), attention per head as :func:`scaled_dot_product_attention`, heads merged back and
    projected: ``output = merged @ w_o.T + b_o``.

    Shapes: query ``(B, L, E)``, key ``(B, S, kdim)``, value ``(B, S, vdim)``; weights in
    ``nn.Linear`` layout ``(out, in)``: w_q ``(E, E)``, w_k ``(E, kdim)``, w_v ``(E, vdim)``,
    w_o ``(E, E)``; biases ``(E,)`` or None. Returns ``(B, L, E)``, and with ``need_weights``
    also the per-head weights ``(B, H, L, S)``.

    ``attn_mask`` follows :func:`scaled_dot_product_attention` (True = attend, float added),
    broadcast to ``(B, H, L, S)``: a key padding mask is ``keep[:, None, None, :]``. Note that
    ``torch.nn.MultiheadAttention`` reads a bool ``attn_mask`` the other way (True = blocked).
    """
    return _qkv._multi_head_attention(
        query, key, value, num_heads, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o,
        attn_mask, is_causal, need_weights, dropout_p,
    )


def softmax(input: ArrayT, dim: int = -1) -> ArrayT:
    """Softmax along ``dim``, as ``torch.softmax``. A slice that is all ``-inf`` gives zeros, not NaN."""
    return cast(ArrayT, _qkv._softmax(input, dim))


def _shape(normalized_shape: int | Sequence[int]) -> list[int]:
    if isinstance(normalized_shape, int):
        return [normalized_shape]
    return [int(d) for d in normalized_shape]


def layer_norm(
    input: ArrayT,
    normalized_shape: int | Sequence[int],
    weight: Any | None = None,
    bias: Any | None = None,
    eps: float = 1e-5,
) -> ArrayT:
    """Layer normalisation over the trailing ``normalized_shape`` dims, as ``torch.nn.functional.layer_norm``.

    Biased variance, statistics in float64 (two passes), weight and bias of shape
    ``normalized_shape`` or None.
    """
    return cast(ArrayT, _qkv._layer_norm(input, _shape(normalized_shape), weight, bias, eps))


def rms_norm(
    input: ArrayT,
    normalized_shape: int | Sequence[int],
    weight: Any | None = None,
    eps: float | None = None,
) -> ArrayT:
    """``input / sqrt(mean(input**2) + eps) * weight`` over the trailing dims, as ``torch.nn.functional.rms_norm``.

    ``eps=None`` is the dtype's machine epsilon, as in torch (Llama configs use 1e-5 or 1e-6).
    The mean of squares is summed in float64.
    """
    return cast(ArrayT, _qkv._rms_norm(input, _shape(normalized_shape), weight, eps))


def apply_rotary_emb(
    x: ArrayT,
    positions: Any | None = None,
    *,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    interleaved: bool = False,
    scaling: Mapping[str, Any] | None = None,
) -> ArrayT:
    """Rotary position embeddings (RoPE) on queries or keys ``x`` of shape ``(..., T, D)``.

    Row ``t`` is rotated by the angles ``positions[t] * base**(-2i / R)``; pairs ``(i, i + R/2)``
    as transformers' ``rotate_half`` (Llama, Mistral, Qwen2), or with ``interleaved=True`` the
    pairs ``(2i, 2i + 1)`` (GPT-J, Meta's Llama code). Dims past ``R = rotary_dim`` (default
    ``D``) are left as they are.

    Args:
        positions: int array ``(T,)``; default ``0, 1, ..., T-1``.
        base: ``rope_theta``.
        scaling: a Hugging Face ``rope_scaling`` dict: ``{"rope_type": "linear", "factor": f}``
            or ``{"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
            "original_max_position_embeddings"}``.
    """
    s = dict(scaling or {})
    kind = str(s.get("rope_type", s.get("type", "default")))
    y = _qkv._apply_rotary_emb(
        x,
        positions,
        base,
        0 if rotary_dim is None else rotary_dim,
        interleaved,
        kind,
        float(s.get("factor", 1.0)),
        float(s.get("low_freq_factor", 1.0)),
        float(s.get("high_freq_factor", 4.0)),
        float(s.get("original_max_position_embeddings", 8192)),
    )
    return cast(ArrayT, y)
