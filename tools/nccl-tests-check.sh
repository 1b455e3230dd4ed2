#!/usr/bin/env bash
# tools/nccl-tests-check.sh — libzwnccl on the GPU machine (issue 19): NVIDIA's nccl-tests (an unmodified copy) built
# against zerowire and run checked, PyTorch's "nccl" backend on zerowire by LD_PRELOAD, the API layer's cost per call,
# and nccl-tests' busbw beside the system NCCL. Sized for one device call of at most 9 minutes on one H200:
#   OUT=... tools/nccl-tests-check.sh          (or ZW_GPU_NCCL_API=1 tools/gpu-check.sh, stage ncclapi)
# Steps (each bounded by its cap and by the overall deadline, ZW_NCCL_BUDGET_S, default 530 s; the summary names what
# was cut):
#   build    configure BUILD (default build-gpu) if needed; ninja libzwnccl first, then the API's CPU tests and
#            zw_nccl_api_overhead, while nccl-tests (MPI=1 when mpicc/mpirun are there, else MPI=0) compiles beside it
#            and links once the library is there (bench/nccl_tests/build.sh with ZW_NCCL_LIB_WAIT_S).
#   torch    as soon as libzwnccl.so exists, in the background while nccl-tests builds and runs: the NCCL symbols that
#            this machine's libtorch_cuda.so imports are all exported (tests/nccl/torch_symbols.sh), then
#            tests/nccl/torch_preload_test.py --part smoke, fsdp (FSDP2 GPT-2 small against a reference) and matrix
#            (the collectives matrix), 2 processes on GPU 0, with the first Python that has torch with CUDA.
#   check    ctest -L '^nccl$' (the API tests; zw_nccl_gpu_api_test runs device memory through it, ranks as threads)
#            beside tests/nccl/nccl_tests_gpu.sh: every nccl-tests binary with -g 1 -c 1 on libzwnccl in one process
#            (float; bfloat16 and avg/max for reductions).
#   shared   2 processes sharing GPU 0 under mpirun (NCCL_TESTS_DEVICE=0), -c 1, every binary on libzwnccl: zerowire
#            allows it; NCCL refuses duplicate GPUs. With 2+ GPUs: one process per GPU.
#   overhead zw_nccl_api_overhead: ns per call, zerowire's C++ API vs NCCL's C API, host memory and device memory;
#            zerowire's own device-memory call with the monitor off, timing every operation, and sampling (default);
#            then zw_cuda_issue_cost: what CUDA's calls and the system NCCL's own calls cost to issue, the floor.
#   compare  busbw of all_gather, reduce_scatter, all_reduce in bfloat16 and float, 8 B - 1 GiB, -c 0: the same
#            nccl-tests binaries on libzwnccl and on the system's libnccl.so.2 (LD_LIBRARY_PATH picks), interleaved,
#            at the same process count (1 on one GPU: the API layer's overhead; one per GPU otherwise). Last, after the
#            torch runs ended, so that nothing else shares the GPU.
# nccl-tests' source: ZW_NCCL_TESTS_SRC, else ../shared/clients/nccl-tests beside the checkout — which does not travel
# to the device machine: copy it into a git-ignored folder of the tree, carry that folder and name it in
# ZW_NCCL_TESTS_SRC. ZW_NCCL_TESTS_PREBUILT=1 uses BUILD/nccl-tests-zw as it is when it has binaries; ZW_NCCL_STEPS=torch,check,shared,
# overhead,compare (the default: all) runs only the steps named (a rerun of what failed). Logs: ZW_NCCL_LOG_DIR (default
# BUILD/nccl-check); with OUT set, packed after every step into $OUT/nccl-check.tar.gz,
# the summary also in $OUT/nccl-check-summary.txt. Exit status 0 only when every check passed (a skip for a missing
# tool passes; a cut does not).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${ZW_GPU_BUILD_DIR:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
LOG=${ZW_NCCL_LOG_DIR:-$BUILD/nccl-check}
START=$(date +%s)
DEADLINE=$((START + ${ZW_NCCL_BUDGET_S:-530}))
rm -rf "$LOG" && mkdir -p "$LOG"
exec > >(tee -a "$LOG/nccl-check.out") 2>&1
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
NP=$((NGPU >= 2 ? NGPU : 2))
NPROC=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export ZW_TIMEOUT=${ZW_TIMEOUT:-20}  # a stuck operation fails naming the peer before a run's limit ends it
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np)
MPI=0
command -v mpicc >/dev/null && command -v mpirun >/dev/null && MPI=1
SFX=$([ "$MPI" = 1 ] && echo _mpi)
status=0
left() { echo $((DEADLINE - $(date +%s))); }
# bounded CAP CMD...: CMD under timeout, CAP seconds at most and never past the deadline (124 when cut).
bounded() { local cap=$1 l; l=$(left); shift; [ "$l" -lt "$cap" ] && cap=$l; [ "$cap" -ge 3 ] || return 124; timeout -k 5 "$cap" "$@"; }
note() { echo "$*" | tee -a "$LOG/summary.txt"; }
cut_or_failed() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ] && echo "CUT (time limit)" || echo "FAILED (exit $1)"; }
pack() {
  [ -n "${OUT:-}" ] || return 0
  cp "$LOG/summary.txt" "$OUT/nccl-check-summary.txt" 2>/dev/null
  tar -czf "$OUT/nccl-check.tar.gz.part" --warning=no-file-changed -C "$(dirname "$LOG")" "$(basename "$LOG")" 2>/dev/null
  mv "$OUT/nccl-check.tar.gz.part" "$OUT/nccl-check.tar.gz"
}
since() { echo "$(($(date +%s) - START)) s"; }
# ZW_NCCL_STEPS=torch,check,...: run only those steps (the build always runs); each left out is named in the summary.
want() { [[ ,${ZW_NCCL_STEPS:-torch,check,shared,overhead,compare}, == *,$1,* ]] || { note "$1: not run (ZW_NCCL_STEPS)"; return 1; }; }

echo "== nccl-tests check: $(date -u +%FT%TZ) $(hostname), $NGPU GPU(s), $NPROC cores, MPI=$MPI, budget $(left) s"
: >"$LOG/summary.txt"

# ---- build ----
if [ ! -f "$BUILD/build.ninja" ]; then
  bounded 90 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$LOG/configure.log" 2>&1 || {
    note "configure FAILED"; tail -20 "$LOG/configure.log"; pack; exit 1; }
fi
ZWLIB=$BUILD/nccl/lib
NT=$BUILD/nccl-tests-zw
ZWBIN=$NT/bin
if [ "${ZW_NCCL_TESTS_PREBUILT:-0}" = 1 ] && [ -x "$ZWBIN/all_reduce_perf$SFX" ]; then
  echo "   nccl-tests: the build in $NT is used as it is (ZW_NCCL_TESTS_PREBUILT=1)" >"$LOG/build-nccl-tests.log"
  true &
else
  rm -f "$ZWLIB/libnccl.so.2"  # so that nccl-tests links only after ninja rebuilt it (ninja restores the link)
  # nccl-tests compiles now and links once ninja has made the library (lower priority: ninja is the critical path).
  ZW_NCCL_LIB_WAIT_S=300 JOBS=$NPROC bounded 330 nice -n 5 bench/nccl_tests/build.sh "$NT" zerowire "$BUILD" "$MPI" \
    >"$LOG/build-nccl-tests.log" 2>&1 &
fi
nt_pid=$!
if bounded 240 ninja -C "$BUILD" -j"$NPROC" nccl_shared zwnccl_shared >"$LOG/ninja.log" 2>&1; then
  note "build: libzwnccl ok ($(since))"
else
  rc=$?
  note "build: libzwnccl $(cut_or_failed $rc) ($(since))"; grep -m10 -E 'error|FAILED' "$LOG/ninja.log"
  kill "$nt_pid" 2>/dev/null; pack; exit 1
fi
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}  # the zerowire runs prepend $ZWLIB; the NCCL runs never see it

# ---- torch (background): symbols, smoke, fsdp, matrix ----
torch_python() {
  local py
  for py in ${ZW_TORCH_PYTHON:-} python3 /usr/bin/python3 /opt/torch/.venv/bin/python; do
    command -v "$py" >/dev/null 2>&1 || continue
    timeout 60 "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 &&
      { command -v "$py"; return 0; }
  done
  return 1
}
torch_chain() {
  local py lib rc part cap
  if ! py=$(torch_python); then note "torch: skipped (no Python here has torch with CUDA)"; return 0; fi
  note "torch: $py, torch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  lib=$("$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
  if bounded 30 tests/nccl/torch_symbols.sh "$BUILD/lib/libzwnccl.so" "$lib" >"$LOG/torch_symbols.log" 2>&1; then
    note "torch: $(tail -1 "$LOG/torch_symbols.log")"
  else
    note "torch: symbol check FAILED: $(tr '\n' ' ' <"$LOG/torch_symbols.log" | cut -c1-400)"; echo 1 >"$LOG/torch.failed"
  fi
  for part in smoke fsdp matrix; do
    case $part in smoke) cap=120 ;; fsdp) cap=150 ;; *) cap=200 ;; esac
    # ends 75 s before the deadline: the overhead and the comparison run after it, alone on the GPU
    [ "$(left)" -lt $((cap + 75)) ] && cap=$(($(left) - 75))
    if [ "$cap" -lt 30 ]; then note "torch $part: not run (no time left)"; echo 1 >"$LOG/torch.failed"; continue; fi
    timeout -k 5 $((cap + 10)) "$py" tests/nccl/torch_preload_test.py "$BUILD" --part "$part" --world 2 \
      --timeout "$cap" --log-dir "$LOG/torch" >"$LOG/torch_$part.txt" 2>&1
    rc=$?
    case $rc in
      0) note "torch $part: ok: $(grep -m1 'all checks passed' "$LOG/torch_$part.txt" | sed 's/.*all checks passed//' | cut -c1-300)" ;;
      77) note "torch $part: skipped ($(tail -1 "$LOG/torch_$part.txt"))" ;;
      *) note "torch $part: FAILED (exit $rc): $(grep -m3 -E 'Error|error|FAILED|timed out' "$LOG/torch_$part.txt" | tr '\n' ' ' | cut -c1-400)"
         echo 1 >"$LOG/torch.failed" ;;  # the next parts still run: they use other operations
    esac
  done
}
torch_pid=
if want torch; then
  torch_chain >"$LOG/torch_chain.log" 2>&1 &
  torch_pid=$!
fi

# ---- build, continued: the CPU API tests and the overhead program, beside nccl-tests' compilation ----
bounded 150 ninja -C "$BUILD" -j"$NPROC" zw_nccl_api_overhead zw_cuda_issue_cost zw_nccl_args_test zw_nccl_coll_test \
  zw_nccl_process_test zw_nccl_rank zw_nccl_env_test zw_nccl_gpu_api_test >>"$LOG/ninja.log" 2>&1 ||
  { rc=$?; note "build: API tests $(cut_or_failed $rc)"; status=1; }
wait "$nt_pid"
rc=$?
if [ "$rc" -eq 0 ] && [ -x "$ZWBIN/all_reduce_perf$SFX" ]; then
  note "build: nccl-tests (MPI=$MPI) on libzwnccl ok ($(since))"
else
  note "build: nccl-tests on libzwnccl $(cut_or_failed "$rc") ($(since)): $(tail -1 "$LOG/build-nccl-tests.log")"
  status=1; tail -20 "$LOG/build-nccl-tests.log"
fi
pack

# ---- check: one process, every binary; the CPU API tests beside it ----
if want check; then
(cd "$BUILD" && bounded 120 ctest -L '^nccl$' --output-on-failure >"$LOG/ctest.log" 2>&1) &
ctest_pid=$!
if [ -x "$ZWBIN/all_reduce_perf$SFX" ]; then
  ZW_NCCL_TESTS_QUICK=1 ZW_NCCL_RUN_TIMEOUT_S=30 bounded 150 tests/nccl/nccl_tests_gpu.sh "$BUILD" "$NT" "$SFX" \
    >"$LOG/one-gpu.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    note "check: nccl-tests -g 1 -c 1 on libzwnccl, one process: $(grep -c '^ok:' "$LOG/one-gpu.log") runs ok"
  else
    note "check: nccl-tests -g 1 -c 1 on libzwnccl, one process: $(cut_or_failed $rc): $(grep -c '^ok:' "$LOG/one-gpu.log") ok," \
      "failed: $(grep '^FAIL' "$LOG/one-gpu.log" | sed 's/.*bin\///; s/ -g 1.* -d / /; s/ -n .*//' | tr '\n' ',' | cut -c1-300)"
    status=1
  fi
fi
wait "$ctest_pid" && note "check: ctest -L nccl ok ($(grep -o '[0-9]*% tests passed.*' "$LOG/ctest.log" | head -1))" ||
  { note "check: ctest -L nccl FAILED"; status=1; grep -E 'Failed|\*\*\*' "$LOG/ctest.log" | head -10; }
fi
pack

# ---- shared: two processes on one GPU (or one per GPU), results checked ----
if ! want shared; then
  :
elif [ "$MPI" = 1 ] && [ -x "$ZWBIN/all_reduce_perf_mpi" ]; then
  env_zw=(-x LD_LIBRARY_PATH="$ZWLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" -x ZW_TIMEOUT)
  [ "$NGPU" -lt 2 ] && env_zw+=(-x NCCL_TESTS_DEVICE=0)
  for bin in all_reduce all_gather reduce_scatter broadcast reduce alltoall alltoallv sendrecv gather scatter hypercube; do
    [ -x "$ZWBIN/${bin}_perf_mpi" ] || continue
    f="$LOG/np${NP}_${bin}.txt"
    bounded 40 "${MPIRUN[@]}" "$NP" "${env_zw[@]}" "$ZWBIN/${bin}_perf_mpi" -g 1 -c 1 -b 8 -e 16M -f 8 -d float -n 5 -w 2 \
      >"$f" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "Out of bounds values : 0 OK" "$f"; then
      note "shared: $NP processes, $bin on libzwnccl, -c 1: ok ($(grep 'Avg bus' "$f" | sed 's/.*: *//') GB/s avg busbw)"
    else
      note "shared: $NP processes, $bin on libzwnccl: $(cut_or_failed $rc) $(grep -m1 -E 'FAILED|failure|error' "$f" | cut -c1-200)"
      status=1
    fi
  done
else
  note "shared: not run (MPI=$MPI: no mpirun/mpicc, or nccl-tests not built)"
  [ "$MPI" = 1 ] && status=1
fi
pack

# ---- wait for the torch runs (the GPU must be quiet for the comparison) ----
while [ -n "$torch_pid" ] && kill -0 "$torch_pid" 2>/dev/null && [ "$(left)" -gt 5 ]; do sleep 1; done
[ -n "$torch_pid" ] && kill -0 "$torch_pid" 2>/dev/null &&
  { note "torch: CUT (deadline)"; kill "$torch_pid"; echo 1 >"$LOG/torch.failed"; }
[ -f "$LOG/torch.failed" ] && status=1
pack

# ---- overhead: the API layer's cost per call ----
bin=$BUILD/bench/nccl_tests/zw_nccl_api_overhead
if ! want overhead; then
  :
elif [ -x "$bin" ]; then
  bounded 20 "$bin" -n 100000 -r 3 >"$LOG/overhead_host.txt" 2>&1 || status=1
  bounded 20 "$bin" -m device -n 20000 -r 3 >"$LOG/overhead_device.txt" 2>&1 || status=1
  cat "$LOG/overhead_host.txt" "$LOG/overhead_device.txt" | grep -v '^#' | tee -a "$LOG/summary.txt"
  # The device monitor's share of zerowire's own issue cost: off, every operation timed, the default sample; with a
  # record ring that holds a whole run (with the default 2048 slots the ring fills within one 50 ms tick of the
  # monitor's thread and later operations are left out, recording nothing).
  for mon in ZW_MONITOR=0 ZW_MONITOR_DEVICE_SAMPLE=1 ZW_MONITOR_DEVICE_SAMPLE=16; do
    echo "monitor $mon: $(bounded 20 env "$mon" ZW_MONITOR_RECORDS=65536 "$bin" -m device -a zw -n 20000 -r 3 2>&1 |
      grep -v '^#' |
      awk '{printf "%s %s ns/call  ", $1, $2}')"
  done | tee "$LOG/overhead_monitor.txt" | tee -a "$LOG/summary.txt"
  # The floor under both: what CUDA's calls cost here, and the system NCCL's own issue cost at world size 1.
  issue=$BUILD/bench/gpu/zw_cuda_issue_cost
  if [ -x "$issue" ]; then
    bounded 30 env ZW_MONITOR_RECORDS=65536 "$issue" -n 20000 -r 3 >"$LOG/issue_cost.txt" 2>&1 || status=1
    tee -a "$LOG/summary.txt" <"$LOG/issue_cost.txt"
  else
    note "overhead: zw_cuda_issue_cost not built"; status=1
  fi
else
  note "overhead: zw_nccl_api_overhead not built"; status=1
fi
pack

# ---- compare: busbw, the same binaries on libzwnccl and on the system NCCL ----
if want compare; then
sys_lib=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}')
note "compare: libnccl.so.2 of the zerowire runs: $(LD_LIBRARY_PATH=$ZWLIB ldd "$ZWBIN/all_reduce_perf$SFX" 2>/dev/null | awk '/libnccl/ {print $3}')"
note "compare: libnccl.so.2 of the NCCL runs:     ${sys_lib:-(none in the ld.so cache: not compared)}"
cmp_np=$((NGPU >= 2 ? NGPU : 1))
for bin in all_gather reduce_scatter all_reduce; do
  for dtype in bfloat16 float; do
    for side in zw sys; do
      [ -x "$ZWBIN/${bin}_perf$SFX" ] || continue
      [ "$side" = sys ] && [ -z "$sys_lib" ] && continue
      [ "$(left)" -gt 10 ] || { echo "   no time left: $side $bin $dtype not run"; continue; }
      lp=$([ "$side" = zw ] && echo "$ZWLIB" || dirname "$sys_lib")
      lp=$lp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      run=(env LD_LIBRARY_PATH="$lp")
      [ "$cmp_np" -gt 1 ] && run=("${MPIRUN[@]}" "$cmp_np" -x LD_LIBRARY_PATH="$lp")
      bounded 25 "${run[@]}" "$ZWBIN/${bin}_perf$SFX" -g 1 -c 0 -b 8 -e 1G -f 8 -d "$dtype" -n 10 -w 3 \
        >"$LOG/cmp_${side}_${bin}_${dtype}.txt" 2>&1 || echo "   cut or failed: $side $bin $dtype"
    done
  done
done
python3 - "$LOG" "$cmp_np" <<'PY' | tee -a "$LOG/summary.txt"
import os, sys
log, np_ = sys.argv[1], sys.argv[2]
def rows(path):
    out = {}
    if not os.path.exists(path): return out
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) >= 13 and f[0].isdigit():
            try: out[int(f[0])] = (float(f[7]), float(f[5]))  # out-of-place busbw GB/s, time us
            except ValueError: pass
    return out
print(f"compare: out-of-place busbw GB/s (time us), {np_} process(es), libzwnccl / NCCL (system), nccl-tests -c 0")
print(f"{'op':15} {'dtype':9} {'bytes':>11} {'zerowire':>18} {'NCCL':>18} {'ratio':>6}")
for op in ("all_gather", "reduce_scatter", "all_reduce"):
    for dt in ("bfloat16", "float"):
        zw, sy = rows(f"{log}/cmp_zw_{op}_{dt}.txt"), rows(f"{log}/cmp_sys_{op}_{dt}.txt")
        if not zw: print(f"{op:15} {dt:9} (no zerowire rows)"); continue
        for size in sorted(zw):
            if size in (8, 8192, 1 << 20, 8 << 20, 64 << 20, 512 << 20, 1 << 30) or size == max(zw):
                z, n = zw[size], sy.get(size)
                ratio = f"{z[0] / n[0]:6.2f}" if n and n[0] else "     -"
                ns = f"{n[0]:8.2f} ({n[1]:7.1f})" if n else f"{'-':>18}"
                print(f"{op:15} {dt:9} {size:11d} {z[0]:8.2f} ({z[1]:7.1f}) {ns} {ratio}")
PY
fi
pack

echo "== nccl-tests check done in $(since), status $status"
echo "status $status after $(since)" >>"$LOG/summary.txt"
pack
exit $status
