#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ for SECONDS each (default 60) under ASan + UBSan, JOBS at
# a time (default 2), from its committed seeds (fuzz/corpus/<target>/) and the seeds the library
# makes (fuzz_make_seeds: checkpoints, weights, GGUF files). Fails on any crash, leak, timeout (an input
# taking over 25 s), out-of-memory (2 GB), sanitizer report or exception that is not a
# qkv::Error; the input that did it is saved in BUILD/fuzz-run/artifacts/ (reproduce with
# `BUILD/fuzz/fuzz_<target> <file>`). Prints seconds, executions and corpus per target.
# Usage: scripts/fuzz_smoke.sh BUILD_DIR [SECONDS] [JOBS]      (make fuzz-smoke runs it)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "$1" && pwd)"
secs="${2:-60}"
jobs="${3:-2}"
targets=(safetensors checkpoint model_folder bpe wordpiece gguf tokenizer chat_template openai)
run="$build/fuzz-run"
rm -rf "$run"
mkdir -p "$run/seeds" "$run/corpus" "$run/artifacts" "$run/logs"

if ! "$build/fuzz/fuzz_make_seeds" "$run/seeds" > "$run/logs/make_seeds.log" 2>&1; then
  cat "$run/logs/make_seeds.log"
  echo "fuzz-smoke: fuzz_make_seeds failed"
  exit 1
fi

symbolizer="$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)"
run_one() {
  local t="$1" dirs=() dict=()
  mkdir -p "$run/corpus/$t"
  for d in "$root/fuzz/corpus/$t" "$run/seeds/$t"; do [ -d "$d" ] && dirs+=("$d"); done
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=("-dict=$root/fuzz/dict/$t.dict")
  # New inputs go to the first corpus folder (scratch), never into the committed seeds.
  QKV_NUM_THREADS=1 ASAN_SYMBOLIZER_PATH="$symbolizer" \
  ASAN_OPTIONS="halt_on_error=1 detect_leaks=1 allocator_may_return_null=0" \
  UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1" \
    "$build/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$run/artifacts/$t-" "${dict[@]}" "$run/corpus/$t" "${dirs[@]}" > "$run/logs/$t.log" 2>&1 &
  local pid=$! rc=0
  wait "$pid" || rc=$?
  echo "$rc" > "$run/logs/$t.rc"
  rm -rf /dev/shm/qkv-fuzz-"$pid"-* "${TMPDIR:-/tmp}"/qkv-fuzz-"$pid"-*  # a crashed harness leaves its scratch folder
}

echo "fuzz-smoke: ${#targets[@]} targets x ${secs} s, $jobs at a time (logs in $run/logs)"
running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

fail=0
printf '%-14s %8s %12s %10s %8s %8s  %s\n' target seconds executions exec/s corpus cov result
for t in "${targets[@]}"; do
  log="$run/logs/$t.log"
  rc="$(cat "$run/logs/$t.rc" 2>/dev/null || echo 99)"
  execs="$(grep -oE 'stat::number_of_executed_units:[[:space:]]*[0-9]+' "$log" | grep -o '[0-9]*$' | tail -1)"
  done_line="$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1)"
  seconds="$(echo "$done_line" | sed -E 's/^Done [0-9]+ runs in ([0-9]+) second.*/\1/')"
  rate="$(grep -oE 'stat::average_exec_per_sec:[[:space:]]*[0-9]+' "$log" | grep -o '[0-9]*$' | tail -1)"
  last="$(grep -E '#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1)"
  corp="$(echo "$last" | grep -o 'corp: [0-9]*' | grep -o '[0-9]*$')"
  cov="$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*$')"
  result=ok
  if [ "$rc" != 0 ] || [ -n "$(ls "$run/artifacts" | grep "^$t-")" ] || [ -z "$done_line" ] ||
     grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|==ERROR|terminate called' "$log"; then
    result="FAILED (rc $rc; see $log)"
    fail=1
  fi
  printf '%-14s %8s %12s %10s %8s %8s  %s\n' "$t" "${seconds:-?}" "${execs:-?}" "${rate:-?}" "${corp:-?}" "${cov:-?}" "$result"
done
if [ "$fail" != 0 ]; then
  for t in "${targets[@]}"; do
    if [ "$(cat "$run/logs/$t.rc" 2>/dev/null)" != 0 ]; then echo "---- $t (tail of its log)"; tail -40 "$run/logs/$t.log"; fi
  done
  ls -l "$run/artifacts"
  echo "fuzz-smoke: FAILED"
  exit 1
fi
echo "fuzz-smoke: every target ran ${secs} s with no crash, leak, timeout or sanitizer report"
