"""qkv: Transformer attention on the CPU, from Python.

    import numpy as np, qkv
    q = k = v = np.random.randn(1, 8, 128, 64).astype(np.float32)
    out = qkv.scaled_dot_product_attention(q, k, v, is_causal=True)   # a NumPy array

Functional ops with PyTorch's names and semantics (:mod:`qkv.functional`) take NumPy arrays,
CPU torch tensors and :class:`qkv.Tensor` without copying them and return the same kind of
array; :class:`Embedder` gives sentence embeddings (SentenceTransformer.encode's contract).
Nothing in this package downloads anything: models are read from local paths.
"""

from __future__ import annotations

from . import functional
from ._errors import ShapeError
from ._qkv import (
    Tensor,
    get_isa,
    get_num_threads,
    manual_seed,
    set_isa,
    set_num_threads,
)
from .arrays import asarray, from_dlpack
from .embedder import Embedder
from .llm import LLM, Generation, Score, supported_models
from .functional import (
    apply_rotary_emb,
    layer_norm,
    multi_head_attention,
    rms_norm,
    scaled_dot_product_attention,
    softmax,
)

__version__ = "0.1.0"

__all__ = [
    "Embedder",
    "Generation",
    "LLM",
    "Score",
    "ShapeError",
    "Tensor",
    "apply_rotary_emb",
    "asarray",
    "from_dlpack",
    "functional",
    "get_isa",
    "get_num_threads",
    "layer_norm",
    "manual_seed",
    "multi_head_attention",
    "rms_norm",
    "scaled_dot_product_attention",
    "set_isa",
    "set_num_threads",
    "softmax",
    "supported_models",
]
