#!/usr/bin/env bash
# make test-python: the Python package built and installed by pip from this tree (pip install .,
# scikit-build-core + nanobind from PyPI) into a virtual environment made here, then its pytest
# suite, mypy over the package (its type stubs) and the example, and the example run as a script.
# Usage: scripts/test_python.sh [BUILD]   (BUILD, default build: the CMake build holding
#        tools/qkv/qkv, for the tests that compare with `qkv generate` / `qkv embed`)
# torch is not installed here (keeps CI small); python/tests/test_torch.py runs where it is.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUILD=$(cd "${1:-build}" && pwd)
VENV=${QKV_PY_VENV:-$ROOT/build-venv}
PYTHON=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q numpy pytest nanobind scikit-build-core mypy
# Reuse compiled objects (ccache) when it is there, and bound the build's jobs. The compiler is
# the one of $BUILD (scikit-build-core would otherwise take Python's sysconfig CXX, g++, where
# CMake took c++: the same compiler under another name, which ccache keys apart).
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
if [ -z "${CXX:-}" ] && [ -f "$BUILD/CMakeCache.txt" ]; then
  CXX=$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' "$BUILD/CMakeCache.txt")
  export CXX
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"$PY" -m pip install -q --no-build-isolation "$ROOT"

# From a scratch folder, so `import qkv` is the installed package, never the source tree.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
QKV_CLI="$BUILD/tools/qkv/qkv" QKV_MODELS="$ROOT/models" QKV_REQUIRE_RESOURCES=1 \
  "$PY" -m pytest -q -p no:cacheprovider --rootdir "$ROOT" -c "$ROOT/pyproject.toml" "$ROOT/python/tests"
"$PY" -m mypy --config-file "$ROOT/pyproject.toml" -p qkv
"$PY" -m mypy --config-file "$ROOT/pyproject.toml" "$ROOT/examples/attention_in_python.py"
"$PY" "$ROOT/examples/attention_in_python.py" --out "$scratch/attention_heatmap.png" >/dev/null
echo "test-python: pytest, mypy and examples/attention_in_python.py passed"
