#!/usr/bin/env bash
# Installs the Debian packages qkv needs, only when one is missing (idempotent).
# Usage: scripts/setup.sh            (build + test dependencies)
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config
      libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev libcli11-dev libfmt-dev libpng-dev libomp-dev
      libopenblas-dev libsimde-dev libpcre2-dev libutf8proc-dev python3-pip chromium bible-kjv
      libcpp-httplib-dev haproxy  # qkv serve (HTTP), and the balancer of its replica test (docs/serving.md)
      libopenmpi-dev openmpi-bin  # data-parallel training: mpirun -np N qkv train ... (docs/distributed.md)
      ccache clang-14 libclang-rt-14-dev llvm-14)  # ccache: make test + test-python share objects; make test-asan / fuzz-smoke: clang, ASan/UBSan/libFuzzer, llvm-symbolizer
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing missing Debian packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
