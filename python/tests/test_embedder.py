"""qkv.Embedder: SentenceTransformer.encode's contract, equal to `qkv embed`, threads, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import qkv

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "Attention is all you need, said the paper; the cat sat on the mat.",
    "",
    "Ünïcödé and emoji 🙂 survive WordPiece.",
]


@pytest.fixture(scope="module")
def embedder(minilm: Path) -> qkv.Embedder:
    return qkv.Embedder(minilm)


def test_encode_equals_qkv_embed(embedder: qkv.Embedder, minilm: Path, qkv_cli: Path) -> None:
    cmd = [str(qkv_cli), "--threads", str(qkv.get_num_threads()), "embed", "--model", str(minilm), "--json", *SENTENCES]
    lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    cli = np.array([json.loads(line)["embedding"] for line in lines], dtype=np.float32)
    ours = embedder.encode(SENTENCES)
    assert ours.shape == cli.shape == (len(SENTENCES), 384)
    np.testing.assert_array_equal(ours, cli)


def test_the_contract_of_sentence_transformers_encode(embedder: qkv.Embedder) -> None:
    e = embedder.encode(SENTENCES)
    assert e.dtype == np.float32 and e.shape == (len(SENTENCES), embedder.dimension)
    assert embedder.get_sentence_embedding_dimension() == 384
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6)
    one = embedder.encode(SENTENCES[3])
    assert one.shape == (384,)
    np.testing.assert_array_equal(one, e[3])
    # each sentence's embedding is the same in any batch
    np.testing.assert_array_equal(embedder.encode(SENTENCES, batch_size=1), e)
    np.testing.assert_array_equal(embedder.encode(tuple(SENTENCES), batch_size=3), e)
    assert embedder.encode([]).shape == (0, 384)
    s = embedder.similarity(e[:2], e)
    assert s.shape == (2, len(SENTENCES))
    np.testing.assert_allclose(s[0, 0], 1.0, atol=1e-6)
    assert s[0, 1] > s[0, 2]  # eating bread is closer to eating food than carrying a baby


def test_progress_bar(embedder: qkv.Embedder, capsys: pytest.CaptureFixture[str]) -> None:
    embedder.encode(SENTENCES * 3, batch_size=4, show_progress_bar=True)
    err = capsys.readouterr().err
    assert f"encode: {len(SENTENCES) * 3}/{len(SENTENCES) * 3}" in err


def test_bad_arguments(embedder: qkv.Embedder, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        embedder.encode(SENTENCES, batch_size=0)
    with pytest.raises(TypeError, match="sentence 1 is int, not str"):
        embedder.encode(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(OSError):
        qkv.Embedder(tmp_path / "no-such-model")


def test_threads_share_one_embedder(embedder: qkv.Embedder) -> None:
    texts = [f"sentence {i}: {SENTENCES[i % len(SENTENCES)]}" for i in range(40)]
    alone = embedder.encode(texts, batch_size=8)
    with ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(lambda i: embedder.encode(texts[i::4], batch_size=8), range(4)))
    for i, part in enumerate(parts):
        np.testing.assert_array_equal(part, alone[i::4])


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_interrupts_a_long_encode(embedder: qkv.Embedder) -> None:
    texts = [f"{SENTENCES[i % 5]} ({i}) " * 4 for i in range(20000)]
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            embedder.encode(texts, batch_size=16)
    finally:
        timer.cancel()
    # the embedder is still usable
    assert embedder.encode(SENTENCES[:1]).shape == (1, 384)
