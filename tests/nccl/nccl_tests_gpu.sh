#!/usr/bin/env bash
# NVIDIA's nccl-tests on libzwnccl, one GPU: every collective binary with -g 1 -c 1 (results checked), float and
# bfloat16 (reductions also with -o avg and max). Exit 77 without a GPU (ctest skips). ZW_NCCL_TESTS_QUICK=1: bfloat16
# for the reductions only; ZW_NCCL_RUN_TIMEOUT_S: limit per run (300).
#   tests/nccl/nccl_tests_gpu.sh BUILD_DIR [NCCL_TESTS_OUT [SUFFIX]]
# Skips (77) when OUT/bin has no build (bench/nccl_tests/build.sh; tools/nccl-tests-check.sh builds one); SUFFIX _mpi
# uses an MPI=1 build, run as single processes.
set -uo pipefail
build="$(cd "$1" && pwd)"
out="${2:-$build/nccl-tests}"
sfx="${3:-}"
# Without arguments, tools/nccl-tests-check.sh's MPI=1 copy serves too.
if [ $# -lt 2 ] && [ ! -x "$out/bin/all_reduce_perf" ] && [ -x "$build/nccl-tests-zw/bin/all_reduce_perf_mpi" ]; then
  out=$build/nccl-tests-zw sfx=_mpi
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU: nccl-tests on libzwnccl need one (skipped)"
  exit 77
fi
if [ ! -x "$out/bin/all_reduce_perf$sfx" ] || [ ! -f "$build/nccl/lib/libnccl.so.2" ]; then
  # Building nccl-tests takes minutes: left to tools/nccl-tests-check.sh (or bench/nccl_tests/build.sh), not ctest.
  echo "nccl-tests on libzwnccl not built in $out (run tools/nccl-tests-check.sh, or ninja nccl_shared and"
  echo "bench/nccl_tests/build.sh $out zerowire $build): skipped"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # MPI=1 builds run as singletons
export LD_LIBRARY_PATH="$build/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
run() {
  local log
  log=$(timeout "${ZW_NCCL_RUN_TIMEOUT_S:-300}" "$@" 2>&1)
  local rc=$?
  if [ $rc -ne 0 ] || grep -q -E "FAILED|Test NCCL failure|Test CUDA failure" <<<"$log" ||
     ! grep -q "Out of bounds values : 0 OK" <<<"$log"; then
    echo "FAIL (rc $rc): $*"
    echo "$log" | tail -25
    fails=$((fails + 1))
  else
    echo "ok: $* ($(grep 'Avg bus bandwidth' <<<"$log" | sed 's/.*: *//') GB/s avg busbw)"
  fi
}
for bin in all_reduce all_gather reduce_scatter broadcast reduce alltoall alltoallv sendrecv gather scatter hypercube; do
  for dtype in float bfloat16; do
    # ZW_NCCL_TESTS_QUICK=1 (tools/nccl-tests-check.sh): bfloat16 for the reductions only
    [ "${ZW_NCCL_TESTS_QUICK:-0}" = 1 ] && [ "$dtype" = bfloat16 ] && [[ $bin != *reduce* ]] && continue
    run "$out/bin/${bin}_perf$sfx" -g 1 -c 1 -b 8 -e 8M -f 8 -d "$dtype" -n 3 -w 1
  done
done
run "$out/bin/all_reduce_perf$sfx" -g 1 -c 1 -b 8 -e 8M -f 8 -d float -o avg -n 3 -w 1
run "$out/bin/reduce_scatter_perf$sfx" -g 1 -c 1 -b 8 -e 8M -f 8 -d bfloat16 -o max -n 3 -w 1
[ $fails -eq 0 ] && echo "nccl-tests on libzwnccl: all passed" || { echo "$fails nccl-tests runs failed"; exit 1; }
