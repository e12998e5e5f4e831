#!/usr/bin/env bash
# Installs the built qkv into a temporary prefix, builds tests/package/consumer
# against it with find_package(qkv), and runs it.
# Usage: run_consumer.sh BUILD_DIR SOURCE_DIR [CXX_COMPILER [FLAGS]]  (FLAGS: e.g. the build's -fsanitize=...)
set -euo pipefail
build_dir="$1"; src_dir="$2"; cxx="${3:-}"; flags="${4:-}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$src_dir/tests/package/consumer" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" ${cxx:+-DCMAKE_CXX_COMPILER="$cxx"} \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
