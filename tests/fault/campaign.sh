#!/usr/bin/env bash
# The long fault campaigns of issue 20 (the short versions run in ctest, label `fault`):
#   tests/fault/campaign.sh BUILD_DIR [TRIALS] [--softroce]
# kill -9 and SIGSTOP of random rank positions at 2-8 processes over shm and tcp (TRIALS each, default 50), the random
# soak with guard bytes (TRIALS x 20 rounds) and the checkpoint kill campaign (TRIALS saves killed at random
# moments). Prints one figure line per campaign and appends them, dated, to BUILD_DIR/fault-campaign.txt.
# --softroce: instead, kill -9 and SIGSTOP over verbs (TRIALS each), all ranks in one Soft-RoCE VM
# (tools/softroce-vm/run.sh, rxe0 under qemu TCG: about 6 s per trial, so 50 each take some 12 minutes).
set -euo pipefail
build=${1:?usage: campaign.sh BUILD_DIR [TRIALS] [--softroce]}
trials=${2:-50}
report=$build/fault-campaign.txt
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(git -C "$(dirname "$0")" rev-parse --short HEAD) trials=$trials ${3:-}" >>"$report"
export ZW_FAULT_TRIALS=$trials ZW_FAULT_REPORT=$report
status=0
if [[ ${3:-} == --softroce ]]; then
  bin=$(realpath "$build/tests")
  out=$("$(dirname "$0")/../../tools/softroce-vm/run.sh" --timeout $((300 + trials * 40)) --env "ZW_FAULT_TRIALS=$trials" \
    --env ZW_FAULT_ONLY=verbs --file "$bin/collectives/zw_rank_probe" -- \
    "$bin/fault/zw_fault_kill_stop_test --gtest_also_run_disabled_tests --gtest_filter=*Campaign*") || status=$?
  printf '%s\n' "$out"
  printf '%s\n' "$out" | tr -d '\r' | sed -n 's/^campaign: //p' >>"$report"
  cat "$report"
  exit $status
fi
"$build/tests/fault/zw_fault_kill_stop_test" --gtest_also_run_disabled_tests --gtest_filter='*Campaign*' || status=1
for t in zw_fault_soak_test zw_fault_ckpt_kill_test; do
  [[ -x $build/tests/fault/$t ]] || continue
  "$build/tests/fault/$t" --gtest_also_run_disabled_tests --gtest_filter='*Campaign*' || status=1
done
cat "$report"
exit $status
