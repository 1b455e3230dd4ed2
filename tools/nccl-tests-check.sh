#!/usr/bin/env bash
# tools/nccl-tests-check.sh — libzwnccl on the GPU machine: NVIDIA's nccl-tests (unmodified copy) built against
# zerowire and against the system's NCCL 2.28, checked and compared. Sized for one 10-minute device call on one H200:
#   run(command="tools/nccl-tests-check.sh")          (also: ZW_GPU_NCCL_API=1 tools/gpu-check.sh runs it as a stage)
# Steps (each bounded; the summary says what ran):
#   1. build   libzwnccl (nccl_shared) and the CPU API tests in BUILD (default build-gpu), then nccl-tests with MPI=1
#              twice, in parallel: against libzwnccl (BUILD/nccl-tests-zw) and against the system NCCL
#              (BUILD/nccl-tests-sys). NVCC_GENCODE defaults to sm_90.
#   2. check   ctest -L '^nccl$' (the CPU API tests) and tests/nccl/nccl_tests_gpu.sh: every nccl-tests binary with
#              -g 1 -c 1 on libzwnccl, float and bfloat16 (one process).
#   3. shared  two processes sharing the one GPU under mpirun (NCCL_TESTS_DEVICE=0), -c 1, on libzwnccl: zerowire
#              allows it; NCCL refuses duplicate GPUs, so on one GPU NCCL runs one process only. With 2+ GPUs
#              (nvidia-h200-x2) both run one process per GPU.
#   4. compare busbw of all_gather, reduce_scatter, all_reduce in bfloat16 and float, 8 B - 1 GiB, libzwnccl beside
#              NCCL at the same process count (1 on one GPU: the API layer's overhead; NGPU otherwise), -c 0.
#   5. overhead zw_nccl_api_overhead (host memory, world size 1): ns per call, zerowire's C++ API vs NCCL's C API.
#   6. torch   tests/nccl/torch_preload_smoke.py: torch.distributed "nccl" on libzwnccl by LD_PRELOAD, 2 processes on
#              GPU 0 (if /usr/bin/python3 has torch and time is left).
# Everything goes to BUILD/nccl-check/ (with OUT set, also $OUT/nccl-check.tar.gz and $OUT/nccl-check-summary.txt).
# Exit status 0 only when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${ZW_GPU_BUILD_DIR:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
LOG=$BUILD/nccl-check
START=$(date +%s)
DEADLINE=$((START + ${ZW_NCCL_BUDGET_S:-570}))
rm -rf "$LOG" && mkdir -p "$LOG"
exec > >(tee -a "$LOG/nccl-check.out") 2>&1
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
NP=$((NGPU >= 2 ? NGPU : 2))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -np"
status=0
left() { echo $((DEADLINE - $(date +%s))); }
bounded() { local cap=$1 l; l=$(left); shift; [ "$l" -lt "$cap" ] && cap=$l; [ "$cap" -ge 3 ] || return 124; timeout -k 5 "$cap" "$@"; }
note() { echo "$*" | tee -a "$LOG/summary.txt"; }

echo "== nccl-tests check: $(date -u +%FT%TZ) $(hostname), $NGPU GPU(s), $(nproc) cores"
# 1. build
if [ ! -f "$BUILD/build.ninja" ]; then
  bounded 120 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$LOG/configure.log" 2>&1 || {
    note "configure FAILED"; tail -20 "$LOG/configure.log"; exit 1; }
fi
bounded 200 ninja -C "$BUILD" nccl_shared zwnccl_shared zw_nccl_api_overhead zw_nccl_args_test zw_nccl_coll_test \
  zw_nccl_process_test zw_nccl_rank >"$LOG/ninja.log" 2>&1 || { note "ninja FAILED"; tail -20 "$LOG/ninja.log"; exit 1; }
# Every binary against zerowire; against NCCL only the three compared (its build runs beside ours).
JOBS=$(( $(nproc) * 2 / 3 > 1 ? $(nproc) * 2 / 3 : 1 )) \
  bounded 300 bench/nccl_tests/build.sh "$BUILD/nccl-tests-zw" zerowire "$BUILD" 1 >"$LOG/build-zw.log" 2>&1 &
zw_pid=$!
JOBS=$(( $(nproc) / 3 > 1 ? $(nproc) / 3 : 1 )) BINS="all_gather reduce_scatter all_reduce" \
  bounded 300 bench/nccl_tests/build.sh "$BUILD/nccl-tests-sys" system 1 >"$LOG/build-sys.log" 2>&1 &
sys_pid=$!
wait $zw_pid && note "build: nccl-tests on libzwnccl ok" || { note "build: nccl-tests on libzwnccl FAILED"; status=1; tail -20 "$LOG/build-zw.log"; }
wait $sys_pid && note "build: nccl-tests on NCCL ok" || { note "build: nccl-tests on the system NCCL FAILED"; tail -20 "$LOG/build-sys.log"; }
ZWBIN=$BUILD/nccl-tests-zw/bin SYSBIN=$BUILD/nccl-tests-sys/bin
ZWLIB=$BUILD/nccl/lib
note "libnccl.so.2 of the zerowire runs: $(LD_LIBRARY_PATH=$ZWLIB ldd "$ZWBIN/all_reduce_perf_mpi" 2>/dev/null | awk '/libnccl/ {print $3}')"
note "libnccl.so.2 of the NCCL runs:     $(ldd "$SYSBIN/all_reduce_perf_mpi" 2>/dev/null | awk '/libnccl/ {print $3}')"
echo "   built in $(($(date +%s) - START)) s"

# 2. check
(cd "$BUILD" && bounded 120 ctest -L '^nccl$' --output-on-failure >"$LOG/ctest.log" 2>&1) &&
  note "check: ctest -L nccl ok" || { note "check: ctest -L nccl FAILED"; status=1; tail -30 "$LOG/ctest.log"; }
if [ -x "$ZWBIN/all_reduce_perf_mpi" ]; then
  bounded 150 tests/nccl/nccl_tests_gpu.sh "$BUILD" "$BUILD/nccl-tests-zw" _mpi >"$LOG/one-gpu.log" 2>&1 &&
    note "check: nccl-tests -g 1 -c 1 on libzwnccl, every binary, float and bfloat16: ok" ||
    { note "check: nccl-tests -g 1 -c 1 on libzwnccl FAILED"; status=1; grep -A12 FAIL "$LOG/one-gpu.log" | head -60; }
fi

# 3. two processes sharing the GPU (or one per GPU), results checked
shared_env=(-x LD_LIBRARY_PATH="$ZWLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
[ "$NGPU" -lt 2 ] && shared_env+=(-x NCCL_TESTS_DEVICE=0)
for bin in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
  [ -x "$ZWBIN/${bin}_perf_mpi" ] || continue
  f="$LOG/np${NP}_${bin}.txt"
  if bounded 60 $MPIRUN "$NP" "${shared_env[@]}" "$ZWBIN/${bin}_perf_mpi" -g 1 -c 1 -b 8 -e 64M -f 8 -d float -n 5 -w 2 \
    >"$f" 2>&1 && grep -q "Out of bounds values : 0 OK" "$f"; then
    note "shared: $NP processes, $bin on libzwnccl, -c 1: ok ($(grep 'Avg bus' "$f" | sed 's/.*: *//') GB/s avg busbw)"
  else
    note "shared: $NP processes, $bin on libzwnccl FAILED"; status=1; tail -15 "$f"
  fi
done

# 4. busbw beside NCCL at the same process count
cmp_np=$((NGPU >= 2 ? NGPU : 1))
for bin in all_gather reduce_scatter all_reduce; do
  for dtype in bfloat16 float; do
    for side in zw sys; do
      dir=$ZWBIN; env=(-x LD_LIBRARY_PATH="$ZWLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
      [ $side = sys ] && { dir=$SYSBIN; env=(); }
      [ -x "$dir/${bin}_perf_mpi" ] || continue
      bounded 60 $MPIRUN "$cmp_np" "${env[@]}" "$dir/${bin}_perf_mpi" -g 1 -c 0 -b 8 -e 1G -f 8 -d "$dtype" -n 10 -w 3 \
        >"$LOG/cmp_${side}_${bin}_${dtype}.txt" 2>&1 || echo "   cut or failed: $side $bin $dtype"
    done
  done
done
python3 - "$LOG" "$cmp_np" <<'PY' | tee -a "$LOG/summary.txt"
import glob, os, sys
log, np_ = sys.argv[1], sys.argv[2]
def rows(path):
    out = {}
    if not os.path.exists(path): return out
    for line in open(path):
        f = line.split()
        if len(f) >= 13 and f[0].isdigit():
            out[int(f[0])] = float(f[7])  # out-of-place busbw, GB/s
    return out
print(f"compare: busbw GB/s (out of place), {np_} process(es), libzwnccl / NCCL 2.28 (system), nccl-tests -c 0")
print(f"{'op':15} {'dtype':9} {'bytes':>11} {'zerowire':>9} {'NCCL':>9} {'ratio':>6}")
for op in ("all_gather", "reduce_scatter", "all_reduce"):
    for dt in ("bfloat16", "float"):
        zw, sy = rows(f"{log}/cmp_zw_{op}_{dt}.txt"), rows(f"{log}/cmp_sys_{op}_{dt}.txt")
        for size in sorted(zw):
            if size in (8192, 1 << 20, 8 << 20, 64 << 20, 512 << 20, 1 << 30) or size == max(zw):
                n = sy.get(size)
                ratio = f"{zw[size] / n:6.2f}" if n else "     -"
                print(f"{op:15} {dt:9} {size:11d} {zw[size]:9.2f} {(n if n is not None else float('nan')):9.2f} {ratio}")
PY

# 5. the API layer's cost per call
bin=$(find "$BUILD" -type f -name zw_nccl_api_overhead -perm -u+x | head -1)
[ -n "$bin" ] && bounded 60 "$bin" -n 100000 -r 3 | tee -a "$LOG/summary.txt"

# 6. PyTorch on libzwnccl through LD_PRELOAD (2 processes sharing GPU 0), if time is left and torch is there
if [ "$(left)" -gt 60 ]; then
  bounded 200 python3 tests/nccl/torch_preload_smoke.py "$BUILD" 2 >"$LOG/torch.log" 2>&1
  rc=$?
  case $rc in
    0) note "torch: torch.distributed (nccl backend) on libzwnccl via LD_PRELOAD, 2 processes on one GPU: ok" ;;
    77) note "torch: skipped ($(tail -1 "$LOG/torch.log"))" ;;
    *) note "torch: FAILED (exit $rc; $LOG/torch.log)"; status=1; tail -30 "$LOG/torch.log" ;;
  esac
else
  note "torch: not run (no time left)"
fi

echo "== nccl-tests check done in $(($(date +%s) - START)) s, status $status"
if [ -n "${OUT:-}" ]; then
  cp "$LOG/summary.txt" "$OUT/nccl-check-summary.txt"
  tar -czf "$OUT/nccl-check.tar.gz" -C "$BUILD" nccl-check 2>/dev/null
fi
exit $status
