#!/usr/bin/env bash
# Installs the built qkv into a temporary prefix, builds tests/package/consumer
# against it with find_package(qkv), and runs it.
set -euo pipefail
build_dir="$1"; src_dir="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$src_dir/tests/package/consumer" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
