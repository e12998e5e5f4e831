"""Shared helpers of the qkv Python tests: the repository's paths, its PyTorch fixtures, its models.

Resources outside the package: the qkv CLI of a build of this tree (QKV_CLI, default
build/tools/qkv/qkv; for parity with `qkv generate` / `qkv embed`) and the models `make models`
fetches (QKV_MODELS, default models/). `make test-python` sets QKV_REQUIRE_RESOURCES=1: then a
missing resource fails the test; otherwise (a bare `pytest` after `pip install .`) such tests
are skipped.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qkv

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"



def cli_generate(cli: Path, model: Path, *args: str) -> dict[str, object]:
    """`qkv generate ... --json` of the CLI at `cli` (with qkv's thread count): its one line, parsed."""
    cmd = [str(cli), "--threads", str(qkv.get_num_threads()), "generate", "--model", str(model), "--json", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    assert len(out) == 1
    result: dict[str, object] = json.loads(out[0])
    return result


_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "I64": np.int64, "BOOL": np.bool_}


def load_safetensors(name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """tests/fixtures/<name>.safetensors -> ({tensor name: array}, parsed config metadata)."""
    data = (FIXTURES / f"{name}.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n :]
    out = {}
    for key, info in header.items():
        b, e = info["data_offsets"]
        out[key] = np.frombuffer(body[b:e], dtype=_ST_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return out, json.loads(meta.get("config", "{}"))


def _resource(env: str | None, default: Path) -> Path:
    value = os.environ.get(env) if env else None
    path = Path(value) if value else default
    if not path.exists():
        if os.environ.get("QKV_REQUIRE_RESOURCES") == "1":
            pytest.fail(f"{path} does not exist (QKV_REQUIRE_RESOURCES=1)")
        pytest.skip(f"{path} not found (run `make models` / `make build`, or set {env or 'QKV_MODELS'})")
    return path


@pytest.fixture(scope="session")
def qkv_cli() -> Path:
    """The qkv command-line tool of a build of this tree."""
    return _resource("QKV_CLI", ROOT / "build" / "tools" / "qkv" / "qkv")


@pytest.fixture(scope="session")
def models_dir() -> Path:
    return _resource("QKV_MODELS", ROOT / "models")


@pytest.fixture(scope="session")
def minilm(models_dir: Path) -> Path:
    return _resource(None, models_dir / "all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def smollm_gguf(models_dir: Path) -> Path:
    """SmolLM2-135M-Instruct as a Q4_1 GGUF file (`make models`)."""
    return _resource(None, models_dir / "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture
def sigint_raises() -> Any:
    """SIGINT raises KeyboardInterrupt during the test, whatever this process inherited: a shell
    starts background jobs with SIGINT ignored, and Python then leaves it ignored (the Ctrl-C
    tests would wait for an interrupt that never comes)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
