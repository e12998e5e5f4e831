#!/usr/bin/env bash
# Installs the Debian packages qkv needs, only when one is missing (idempotent).
# Usage: scripts/setup.sh            (build + test dependencies)
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config
      libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev libcli11-dev libfmt-dev libpng-dev libomp-dev
      libopenblas-dev libsimde-dev libpcre2-dev libutf8proc-dev python3-pip chromium bible-kjv
      libedit-dev tmux  # qkv chat: line editing and history; its terminal test drives it through tmux
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
# One line per step; apt's own output goes to a log, shown only when a step fails.
log="${TMPDIR:-/tmp}/qkv-setup-$(id -u).log"
: > "$log"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
step() {
  local what=$1; shift
  echo "setup: $what"
  if ! "$@" >> "$log" 2>&1; then
    echo "setup: failed: $what; its output (from $log):" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
step "updating the package lists (apt-get update)" $SUDO apt-get update -qq
step "installing ${#missing[@]} Debian packages: ${missing[*]}" \
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done (apt's log: $log)"
