#!/usr/bin/env bash
# The long fuzzing campaign of docs/RELIABILITY.md: runs each fuzz target for RUNS executions from its seed corpus,
# niced, JOBS targets at a time, a target with W workers as W libFuzzer jobs sharing one corpus (each job runs
# RUNS/W; they pick up each other's finds through -reload), and prints one line per target: executions (summed
# over its workers), seconds, coverage (cov: and ft: of the last status line, highest worker), corpus size, crashes.
#   [FUZZ_BIN=build-fuzz/tests/fuzz] [FUZZ_OUT=$FUZZ_BIN/long] [RUNS=10000000] [JOBS=2] [MAX_TIME=0]
#   [WORKERS="fuzz_ds_config=4 ..."] tests/fuzz/long_run.sh [TARGET...]
# MAX_TIME > 0 stops each worker after that many seconds (its executions so far are counted). Crash artifacts land
# in $FUZZ_OUT/<target>/; copy each into tests/fuzz/corpus/<target>/crash-<what> once it is fixed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin_dir=${FUZZ_BIN:-build-fuzz/tests/fuzz}
out_dir=${FUZZ_OUT:-$bin_dir/long}
mkdir -p "$out_dir" && out_dir=$(cd "$out_dir" && pwd)
runs=${RUNS:-10000000} jobs=${JOBS:-2} max_time=${MAX_TIME:-0}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for b in "$bin_dir"/fuzz_*; do
    n=$(basename "$b")
    [ "$n" = fuzz_corpus_gen ] || [ ! -x "$b" ] || targets+=("$n")
  done
fi
declare -A max_len=([fuzz_unique_id]=160 [fuzz_shm_wire]=8192 [fuzz_tcp_wire]=16384 [fuzz_verbs_wire]=2048
                  [fuzz_peer_record]=1024 [fuzz_cuda_ipc_mailbox]=2100 [fuzz_verbs_liveness]=256)
declare -A workers=()
for kv in ${WORKERS:-}; do workers[${kv%%=*}]=${kv#*=}; done

run_one() {
  local t=$1 w=${workers[$1]:-1}
  local dir="$out_dir/$t" bin
  bin=$(cd "$bin_dir" && pwd)/$t
  mkdir -p "$dir/corpus"
  rm -f "$dir"/fuzz-*.log
  local args=(-runs=$(( (runs + w - 1) / w )) -max_len="${max_len[$t]:-4096}" -timeout=25 -rss_limit_mb=2048
              -max_total_time="$max_time" -artifact_prefix="$dir/" -print_final_stats=1 "$dir/corpus"
              "$here/corpus/$t")
  local start=$(date +%s)
  if [ "$w" -gt 1 ]; then
    (cd "$dir" && nice -n "${NICE:-15}" "$bin" -jobs="$w" -workers="$w" "${args[@]}" > "$dir/jobs.log" 2>&1)
  else
    nice -n "${NICE:-15}" "$bin" "${args[@]}" > "$dir/fuzz-0.log" 2>&1
  fi
  local secs=$(( $(date +%s) - start ))
  local execs=0 cov=0 ft=0
  for log in "$dir"/fuzz-*.log; do
    local e=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    local last=$(grep -aE '^#[0-9]+' "$log" | tail -1)
    local c=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*') f=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*')
    execs=$(( execs + ${e:-0} ))
    [ "${c:-0}" -gt "$cov" ] && cov=$c
    [ "${f:-0}" -gt "$ft" ] && ft=$f
  done
  local crashes=$(find "$dir" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  printf '%-22s execs=%d workers=%d secs=%d cov=%d ft=%d corpus=%d crashes=%d\n' "$t" "$execs" "$w" "$secs" "$cov" \
    "$ft" "$(ls "$dir/corpus" | wc -l)" "$crashes" | tee "$dir/summary"
}

for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_one "$t" &
done
wait
