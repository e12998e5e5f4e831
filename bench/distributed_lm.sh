#!/usr/bin/env bash
# Data-parallel scaling of `qkv train lm` on this machine (docs/distributed.md): tokens/s of
#   1 rank  x 1 thread   --grad-accum 2   (the global batch: 2 micro-batches of --batch windows)
#   2 ranks x 1 thread   --grad-accum 1   (the same global batch, one micro-batch per rank)
#   1 rank  x 2 threads  --grad-accum 2
# for the demo's GPT and the GPT of BENCHMARKS.md's KJV run, ROUNDS rounds interleaved,
# medians. tokens/s per run: the median of its evaluations' tokens_per_s after the first
# (training steps only, as `qkv train lm` reports them); rank 0's time blocked on the other
# rank per step from the same reports (wait_s / steps).
# Run it alone on the machine, under the CPU lock:
#   flock /tmp/qkv-cpu.lock bench/distributed_lm.sh [build/tools/qkv/qkv] [ROUNDS] [CORPUS]
set -euo pipefail
QKV=$(realpath "${1:-build/tools/qkv/qkv}")
ROUNDS=${2:-3}
CORPUS=$(realpath "${3:-data/kjv.txt}")
MPIRUN=(mpirun --oversubscribe --allow-run-as-root -np 2)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"

median() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# tokens/s of one run (median of the evaluations after the first) from its --json output.
tps() { grep -o '"tokens_per_s":[0-9.e+]*' | cut -d: -f2 | tail -n +2 | median; }
# rank 0's wait per step in ms: the evaluations' wait_s after the first, over EVERY steps each.
waitms() { grep -o '"wait_s":[0-9.e+-]*' | cut -d: -f2 | sed -n '2,$p' | head -n -1 | awk -v e="$1" '{print 1e3*$1/e}' | median; }

run_config() {
  local name=$1 vocab=$2 steps=$3 every=$4
  shift 4
  local model=("$@")
  "$QKV" train lm --text "$CORPUS" --vocab-size "$vocab" --init-only --out "tok_$vocab" --threads 2 --no-progress > /dev/null
  local common=(--text "$CORPUS" --tokenizer "tok_$vocab" "${model[@]}" --steps "$steps" --eval-every "$every"
                --val-windows 8 --sample-tokens 1 --json --no-progress)
  local a=() b=() c=() wt=()
  for r in $(seq "$ROUNDS"); do
    a+=("$("$QKV" train lm "${common[@]}" --threads 1 --grad-accum 2 --out a | tps)")
    local out
    out=$("${MPIRUN[@]}" "$QKV" train lm "${common[@]}" --threads 1 --out b)
    b+=("$(echo "$out" | tps)")
    wt+=("$(echo "$out" | waitms "$every")")
    c+=("$("$QKV" train lm "${common[@]}" --threads 2 --grad-accum 2 --out c | tps)")
    echo "$name round $r: 1x1 ${a[-1]}, 2 ranks x 1 ${b[-1]} (wait ${wt[-1]} ms/step), 1x2 ${c[-1]} tokens/s" >&2
  done
  local ma mb mc mw
  ma=$(printf '%s\n' "${a[@]}" | median)
  mb=$(printf '%s\n' "${b[@]}" | median)
  mc=$(printf '%s\n' "${c[@]}" | median)
  mw=$(printf '%s\n' "${wt[@]}" | median)
  printf '%s | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.2f\n' "$name" "$ma" "$mb" "$mc" \
    "$(echo "$mb / $ma" | bc -l)" "$(echo "$mb / $mc" | bc -l)" "$mw"
}

echo "model | 1 rank x 1 thread | 2 ranks x 1 thread | 1 rank x 2 threads | 2x1 / 1x1 | 2x1 / 1x2 | rank 0 wait, ms/step"
run_config "demo GPT (3 x 64, context 64, batch 16)" 1024 100 25 --layers 3 --d-model 64 --heads 4 --context 64 --batch 16
run_config "KJV GPT (6 x 256, context 256, batch 16)" 4096 12 4 --layers 6 --d-model 256 --heads 8 --context 256 --batch 16
