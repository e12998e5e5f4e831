#!/usr/bin/env bash
# Decode and 512-token prefill of GGUF files, qkv `bench generate` (--activations q8 and f32) vs
# llama.cpp's llama-bench, on 1 and 2 threads, interleaved, with `qkv bench peak` each round.
# bench generate reports the read bandwidth it measured in the same run and the decode's fraction
# of that bound. Summarise with bench/models_summary.py OUT.jsonl.
# Usage: bench/models_vs_llamacpp.sh OUT.jsonl MODEL.gguf...
#   QKV_BIN (default build/tools/qkv), LLAMA_BENCH (default $LLAMA_CPP_BIN/llama-bench),
#   ROUNDS (default 2), THREADS (default "1 2"), QKV_LOCK (a flock file every run takes, so that
#   nothing else built or benchmarked on the machine runs at the same time; default /tmp/qkv-cpu.lock)
set -u
OUT=$1; shift
QKV=${QKV_BIN:-build/tools/qkv}
LB=${LLAMA_BENCH:-${LLAMA_CPP_BIN:-/root/peers/llama.cpp-build/bin}/llama-bench}
L=${QKV_LOCK:-/tmp/qkv-cpu.lock}
: > "$OUT"
for round in $(seq 1 "${ROUNDS:-2}"); do
  flock "$L" "$QKV" bench peak --json 2>/dev/null | tail -1 | sed "s/^/{\"round\":$round,\"peak\":/; s/$/}/" >> "$OUT"
  for M in "$@"; do
    for T in ${THREADS:-1 2}; do
      for act in q8 f32; do
        r=$(flock "$L" "$QKV" --threads "$T" bench generate --model "$M" --activations $act --prompt-len 16 --new 128 --repeat 3 --json 2>/dev/null | tail -1)
        echo "{\"round\":$round,\"tool\":\"qkv\",\"model\":\"$M\",\"T\":$T,\"act\":\"$act\",\"test\":\"decode\",\"r\":${r:-null}}" >> "$OUT"
        p=$(flock "$L" "$QKV" --threads "$T" bench generate --model "$M" --activations $act --prompt-len 512 --new 1 --repeat 3 --json 2>/dev/null | tail -1)
        echo "{\"round\":$round,\"tool\":\"qkv\",\"model\":\"$M\",\"T\":$T,\"act\":\"$act\",\"test\":\"prefill512\",\"r\":${p:-null}}" >> "$OUT"
      done
      lb=$(flock "$L" "$LB" -m "$M" -t "$T" -p 512 -n 128 -r 3 -o json 2>/dev/null | tr -d '\n')
      echo "{\"round\":$round,\"tool\":\"llama.cpp\",\"model\":\"$M\",\"T\":$T,\"r\":${lb:-null}}" >> "$OUT"
    done
  done
done
