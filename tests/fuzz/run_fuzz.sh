#!/usr/bin/env bash
# Runs one fuzz target for a few seconds from its committed seed corpus (the ctest entry of tests/fuzz).
#   run_fuzz.sh BINARY SEED_DIR WORK_DIR SECONDS [MAX_LEN]
# New inputs go to WORK_DIR/new (the seed directory is only read), crash artifacts to WORK_DIR/. Exits non-zero
# (libFuzzer's code) on a crash, a sanitizer report, a leak or a timeout of one input; the seeds themselves are
# run first, so every committed regression input is re-checked on each run.
set -euo pipefail
bin=$1 seeds=$2 work=$3 seconds=$4 max_len=${5:-4096}
mkdir -p "$work/new"
exec "$bin" -max_total_time="$seconds" -max_len="$max_len" -timeout=25 -rss_limit_mb=2048 \
  -artifact_prefix="$work/" -print_final_stats=1 "$work/new" "$seeds"
