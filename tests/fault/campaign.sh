#!/usr/bin/env bash
# The long fault campaigns of issue 20 (the short versions run in ctest, label `fault`):
#   tests/fault/campaign.sh BUILD_DIR [TRIALS]
# kill -9 and SIGSTOP of random rank positions at 2-8 processes over shm and tcp (TRIALS each, default 50), the random
# soak with guard bytes (TRIALS x 20 rounds) and the checkpoint kill campaign (TRIALS saves killed at random
# moments). Prints one figure line per campaign and appends them, dated, to BUILD_DIR/fault-campaign.txt.
set -euo pipefail
build=${1:?usage: campaign.sh BUILD_DIR [TRIALS]}
trials=${2:-50}
report=$build/fault-campaign.txt
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(git -C "$(dirname "$0")" rev-parse --short HEAD) trials=$trials" >>"$report"
export ZW_FAULT_TRIALS=$trials ZW_FAULT_REPORT=$report
status=0
"$build/tests/fault/zw_fault_kill_stop_test" --gtest_also_run_disabled_tests --gtest_filter='*Campaign*' || status=1
for t in zw_fault_soak_test zw_fault_ckpt_kill_test; do
  [[ -x $build/tests/fault/$t ]] || continue
  "$build/tests/fault/$t" --gtest_also_run_disabled_tests --gtest_filter='*Campaign*' || status=1
done
cat "$report"
exit $status
