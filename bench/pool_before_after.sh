#!/usr/bin/env bash
# Thread pool before/after (BENCHMARKS.md, "Thread pool"): interleaved rounds of the classifier
# training, attention forward, GEMM 512^3 and 128^3 and the FMA peak, at 1 and 2 threads, on an idle
# machine and beside one busy process, OMP_WAIT_POLICY unset (before_passive: =PASSIVE, as make used
# to export). Binaries: /tmp/qkv-before (built from 2126a73), /tmp/qkv-after-s0 (this pool), ...
# Run under the CPU lock: ROUNDS=10 VARIANTS="before before_passive after_s0" flock /work/cpu.lock
# bench/pool_before_after.sh > out.tsv; python3 bench/pool_summary.py out.tsv (medians).
# variant threads load workload value
set -u
ROUNDS=${ROUNDS:-5}
declare -A BIN=([before]=/tmp/qkv-before [before_passive]=/tmp/qkv-before [after_s20]=/tmp/qkv-after-s20 [after_s0]=/tmp/qkv-after-s0 [after_s100]=/tmp/qkv-after-s100)
VARIANTS=${VARIANTS:-"before before_passive after_s20 after_s0 after_s100"}
run() {  # variant threads load
  local v=$1 t=$2 l=$3 q=${BIN[$1]}
  local envp="env -u OMP_WAIT_POLICY"
  [ "$v" = before_passive ] && envp="env OMP_WAIT_POLICY=PASSIVE"
  local s e
  s=$(date +%s.%N)
  $envp $q train classify --balanced --epochs 300 --lr 3e-3 --threads $t >/dev/null 2>&1
  e=$(date +%s.%N)
  echo -e "$v\t$t\t$l\ttrain_s\t$(echo "$e - $s" | bc)"
  echo -e "$v\t$t\t$l\tattn_ms\t$($envp $q bench attention --batch 4 --heads 8 --len 256 --dim 64 --repeat 20 --warmup 3 --threads $t --json | python3 -c 'import json,sys;print(json.loads(sys.stdin.readline())["median_ms"])')"
  echo -e "$v\t$t\t$l\tgemm512_ms\t$($envp $q bench gemm --m 512 --n 512 --k 512 --repeat 30 --warmup 3 --threads $t --json | python3 -c 'import json,sys;print(json.loads(sys.stdin.readline())["median_ms"])')"
  echo -e "$v\t$t\t$l\tgemm128_ms\t$($envp $q bench gemm --m 128 --n 128 --k 128 --repeat 200 --warmup 10 --threads $t --json | python3 -c 'import json,sys;print(json.loads(sys.stdin.readline())["median_ms"])')"
  echo -e "$v\t$t\t$l\tpeak_gflops\t$($envp $q bench peak --seconds 0.3 --threads $t --json | python3 -c 'import json,sys;print(json.loads(sys.stdin.readline())["gflops"])')"
}
for r in $(seq $ROUNDS); do
  for l in idle busy; do
    hog=
    if [ $l = busy ]; then timeout 600 sh -c 'while :; do :; done' & hog=$!; sleep 0.2; fi
    for t in 1 2; do
      for v in $VARIANTS; do run $v $t $l; done
    done
    if [ -n "$hog" ]; then kill $hog; wait $hog 2>/dev/null; fi
  done
done
