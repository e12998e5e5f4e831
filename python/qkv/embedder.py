"""Sentence embeddings with SentenceTransformer.encode's contract: :class:`Embedder`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, overload

import numpy as np

from . import _qkv
from ._progress import ProgressBar
from ._types import Float32Array


class Embedder:
    """A sentence-transformers model folder (BERT family, e.g. all-MiniLM-L6-v2), loaded once.

    Tokenizer (WordPiece), model, pooling (``1_Pooling/config.json``) and normalisation
    (``modules.json``) are read from the folder, as sentence-transformers reads them; nothing is
    downloaded. Weights are memory-mapped. One Embedder may serve :meth:`encode` calls from
    several Python threads at once (the GIL is released while it computes).

        emb = qkv.Embedder("models/all-MiniLM-L6-v2")
        vecs = emb.encode(["A man is eating food.", "A man is riding a horse."])   # (2, 384) float32
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._impl = _qkv._Embedder(self.path)

    @property
    def dimension(self) -> int:
        """The embedding width d (384 for all-MiniLM-L6-v2)."""
        return int(self._impl.dimension)

    def get_sentence_embedding_dimension(self) -> int:
        """The embedding width d, as SentenceTransformer names it."""
        return self.dimension

    @overload
    def encode(
        self,
        sentences: str,
        batch_size: int = 32,
        show_progress_bar: bool = False,
        normalize_embeddings: bool = True,
        convert_to_tensor: bool = False,
    ) -> Float32Array: ...
    @overload
    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 32,
        show_progress_bar: bool = False,
        normalize_embeddings: bool = True,
        convert_to_tensor: bool = False,
    ) -> Float32Array: ...
    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int = 32,
        show_progress_bar: bool = False,
        normalize_embeddings: bool = True,
        convert_to_tensor: bool = False,
    ) -> Any:
        """Embeds ``sentences``: an ``(n, d)`` float32 array in input order (``(d,)`` for one string).

        As ``SentenceTransformer.encode``: texts are sorted by length and embedded ``batch_size``
        at a time (each sentence's embedding is the same in any batch), pooled as the folder
        says, and L2-normalised when ``normalize_embeddings`` (the default here) or when the
        folder's modules end with Normalize. ``show_progress_bar`` draws a bar on stderr;
        ``convert_to_tensor`` returns a torch tensor (viewing the same memory). Ctrl-C raises
        KeyboardInterrupt between batches.

        Raises ValueError for ``batch_size < 1`` or a text that is not valid UTF-8.
        """
        single = isinstance(sentences, str)
        texts: list[str] = [sentences] if isinstance(sentences, str) else list(sentences)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"encode: sentence {i} is {type(t).__name__}, not str")
        progress = ProgressBar("encode", len(texts)) if show_progress_bar and texts else None
        out: Any = self._impl.encode(texts, batch_size, normalize_embeddings, progress)
        result = out[0] if single else out
        if convert_to_tensor:
            import torch

            return torch.from_numpy(result)
        return result

    def similarity(self, a: Any, b: Any) -> Any:
        """Cosine similarities ``(n, m)`` of embeddings a ``(n, d)`` and b ``(m, d)`` (float64 sums)."""
        return _qkv._Embedder.similarity(np.atleast_2d(a) if isinstance(a, np.ndarray) else a,
                                         np.atleast_2d(b) if isinstance(b, np.ndarray) else b)
