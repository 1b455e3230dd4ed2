#!/usr/bin/env bash
# tools/gpu-check.sh — the GPU check of zerowire, sized to end inside one 10-minute device call on ONE H200, and run
# the same way on two (the stages that need a second GPU say so and are skipped on one):
#   run(command="tools/gpu-check.sh")                              full check (about 9.5 min at most)
#   run(command="ZW_GPU_QUICK=1 tools/gpu-check.sh")               build + GPU tests only (a few minutes)
#   run(command="tools/gpu-check.sh", kind="nvidia-h200-x2")       full check with the NCCL comparison
#
# Stages, in order. Each prints its wall time and runs with a budget: its cap below, and never past the overall
# deadline (ZW_GPU_BUDGET_S, default 560 s, quick 330 s, counted from the start, less 10 s kept for the summary);
# every command in a stage runs under `timeout` within that budget. A stage that reaches a limit is "CUT" (the
# summary says which); the later stages still run while time is left. Caps sum to more than the deadline: they
# bound a stage that misbehaves, the deadline bounds the whole, and the stages that matter most come first.
#   info       machine, kernel, GPUs, topology, CUDA_* variables, whether compute-sanitizer is there.
#   build      cap 210 s. Configures build-gpu/ (Release, Ninja) and builds, among the targets this tree has (ninja's
#              own list, so targets that have not landed yet are named and left out), first what the tests need
#              (zw_cuda_kernels_test zw_gpu_collectives_test zw_gpu_staged_test zw_gpu_zero_offload_test
#              zw_tensor_cuda_test zw_model_cuda_test zw_gpu_coll_perf zwrun zw_train — the zero3 stage runs it in
#              quick mode too — and every other ctest entry matching 'cuda|gpu' that is a target, e.g.
#              zw_train_cuda_test), then in full mode the programs of the benchmarks (zw_cuda_reduce_bench
#              zw_offload_bench zw_nccl_perf); ninja -k 0, so a target that
#              fails to build is named and the rest are built. ZW_GPU_FULL_BUILD=1 builds all.
#   tests      cap 280 s (quick 200 s). Every ctest entry matching 'cuda|gpu', one ctest call each under its own
#              limit for one GPU (collectives 150 s, ring 120 s, model and train 120 s, tensor 90 s, zwrun checks
#              30-45 s, others 60 s; quick: collectives 75 s, ring 60 s), the fast ones first, the collectives last. The
#              collectives tests print where their time goes (ZW_TEST_PROGRESS=1: a line per case and per world, and
#              where every rank is whenever no case finishes for a while) and fail a stalled case after
#              ZW_TEST_TIMEOUT_S (30 s; quick 20 s) instead of 60. Quick mode runs the collectives on worlds of 1-3
#              ranks and a subset of the cases (ZW_TEST_WORLDS=1,2,3 ZW_TEST_CASES=quick) and leaves out the 3- and
#              4-process staged checks. Tests that need more GPUs than are visible skip with "needs N GPUs"; the
#              summary lists them apart from the other skips.
#   memcheck   cap 110 s; full mode (quick: with ZW_GPU_MEMCHECK=1). compute-sanitizer --tool memcheck on the op
#              tests (zw_cuda_kernels_test 30 s, zw_tensor_cuda_test 90 s: 177 of its 201 tests took 60 s on an
#              H100), each with its ERROR SUMMARY line; skipped with a message where compute-sanitizer is absent.
#              The remaining stages are full mode only.
#   multiproc  cap 40 s. 4 processes under zwrun on the visible GPU(s) (more ranks than GPUs: contexts time-sliced),
#              direct and ring, all-gather, reduce-scatter and all-reduce 8 KiB-32 MiB, every size validated.
#   zero3      cap 240 s (quick too). tests/zero/gpu/zwrun_gpu_train_test.sh through ctest (zw_gpu_zero_train_test, left
#              out of the tests stage): the ZeRO-3 engine on the GPU as processes under zwrun — parity with the
#              single-process GPU trainer on 1-4 ranks, the seed and demo configs, resume on 3 GPU ranks and on the
#              CPU, the timeline's device spans, a killed rank named by the survivor. ZW_ZERO_GPU_PARTS picks parts.
#   reduce     cap 20 s. zw_cuda_reduce_bench: the CUDA reduce kernels against a device-to-device copy.
#   offload    cap 30 s. zw_offload_bench: the ZeRO-3 offloaded optimizer's copies hidden behind the host Adam update.
#   peercopy   2 GPUs, cap 60 s. zw_nccl_perf -t peercopy, the cudaMemcpyPeerAsync push reference, REPS times.
#   nccl       2 GPUs, cap 240 s. zw_gpu_coll_perf under zwrun, one process per GPU: zerowire and NCCL interleaved,
#              allgather, reducescatter and allreduce in bf16 and f32 from 8 KiB to 1 GiB, REPS repetitions.
#   ring       2 GPUs, cap 120 s. The same with ZW_CUDA_ALGO=ring (bf16, one repetition), beside direct and NCCL.
#   train      cap 300 s, if bench/train/gpu.sh exists: the training comparison with REPS, SHAPES (default 124m
#              here) and DEADLINE_S set to what is left less 60 s, so it skips what would not end in time and still
#              prints its table. IMPLS on one GPU: zw_train, its ZeRO-3 engine on one rank, PyTorch eager and compile;
#              on several: the ZeRO-3 engine against FSDP2 eager and compiled, one rank per GPU (NPROC). Then, in
#              those 60 s, the seed's offloaded ZeRO-3 configuration at 4 accumulation steps against the same without
#              offload (one GPU) or FSDP2 with CPUOffloadPolicy (several) (train_zero3.txt; with DS_WHEELS, DeepSpeed
#              too, see bench/train/gpu.sh). On one GPU this stage gets what the others left (typically 3-5 min): runs
#              that would not fit are skipped and the stage shows PARTIAL (gpu.sh's exit 75), not FAILED, unless a
#              run failed.
#   ncclapi    only with ZW_GPU_NCCL_API=1, best alone: ZW_GPU_SKIP=build,tests,memcheck,zero3,multiproc,reduce,offload,
#              train (with build skipped the tree is only configured; the stage builds what it needs itself):
#              tools/nccl-tests-check.sh — nccl-tests on libzwnccl (-c 1, one process and two sharing the GPU),
#              PyTorch's "nccl" backend on libzwnccl by LD_PRELOAD (symbols, smoke, FSDP2 GPT-2 small against a
#              reference, the collectives matrix), the API layer's cost per call, busbw beside the system NCCL (bf16,
#              float). Logs in gpu-check/ncclapi/.
#   torch      cap 300 s, only with ZW_GPU_TORCH=1 (best with ZW_GPU_SKIP=tests,memcheck,zero3,multiproc,reduce,
#              offload,train): tests/python/gpu_stage.sh — pip installs python/ (the torch backend) against this build
#              and the torch of python3 (ZW_TORCH_PYTHON, else python3 on PATH, /opt/torch/.venv, /usr/bin/python3),
#              offline, then on CUDA tensors, 2 processes sharing GPU 0: Work semantics, the collectives matrix
#              against Gloo, FSDP2 GPT-2-small training against Gloo, the point-to-point matrix (logs torch_*.txt).
#   monitor    only with ZW_GPU_MONITOR=1 (best with ZW_GPU_SKIP=tests,memcheck,zero3,multiproc,reduce,offload,train):
#              the monitoring's cost on this host's quiet CPUs (issue 23): zw_monitor_hook_bench, zw_monitor_ab (on
#              against off paired in one process, 4 KiB all_gather and all_reduce, 2 and 4 ranks), `ctest -L monitor`
#              (with zw_monitor_gpu_test: the device path's records from CUDA events on GPU 0), and
#              bench/monitor/overhead.py (on/off paired back to back, 2 and 4 ranks over shm, all_gather and
#              all_reduce: 4-256 KiB with 9 repetitions of 500 iterations, 1-64 MiB with 3 of 20; the metrics' busbw
#              over the benchmark's per pair; monitor.txt, monitor_tests.txt). Capped at 300 s.
#   hostcpu    only with ZW_GPU_HOSTCPU=1 (best with ZW_GPU_TORCH=1 ZW_GPU_SKIP=tests,memcheck,zero3,multiproc,reduce,
#              offload,train): the host helper threads on this host's cores (issue 18): bench/host_threads.py
#              (zw_*_perf over shm, 2 and 4 ranks, 1 and 4 threads per rank, 1-64 MiB, 3 rotating rounds), then, where
#              the torch stage installed the package, the torch backend against Gloo at the defaults (all_gather,
#              reduce_scatter and all_reduce, 64 KiB-64 MiB), all_reduce with ZW_HOST_THREADS=1, the FSDP2 CPU
#              training step (bench/torch/bench_fsdp.py) against Gloo, and where a torch call's time goes at 1 and
#              4 MiB (bench/torch/call_anatomy.py: through zerowire, torch's path on its do-nothing FakeProcessGroup,
#              and zerowire alone) (hostcpu.txt). Capped at 480 s.
#   summary    printed last: stage times and status, the tests (failed or cut with their first error lines, skipped
#              for lack of GPUs, other skips), the collectives' time per world and stalls, memcheck, the 4-process
#              runs, then the benchmark tables: reduce, offload, train, zerowire vs NCCL and the ring kernels.
# cuDNN attention (the tensor layer's default where cuDNN takes the call): the build needs the cudnn-frontend headers,
# which tools/cudnn-frontend.sh fetches from PyPI; on a machine without PyPI, copy its output's parent directory to
# .deps/cudnn-frontend in the tree first (the build stage prints whether the cuDNN path was built; without it the
# attention tests fail, saying so).
# Environment: ZW_GPU_QUICK=1, ZW_GPU_FULL_BUILD=1, ZW_GPU_REPS (or REPS; default 3), ZW_GPU_BUDGET_S,
# ZW_GPU_BUILD_DIR (default build-gpu), ZW_GPU_MEMCHECK=1, ZW_GPU_SKIP=stage,stage (e.g. train), SHAPES (train);
# the collectives' own switches (ZW_TEST_WORLDS, ZW_TEST_CASES, ZW_TEST_TIMEOUT_S) override the mode's values.
# Everything written goes to build-gpu/gpu-check/ (the script's own output to gpu-check.out); with OUT set, that
# folder is packed into $OUT/gpu-check-logs.tar.gz after every stage (so a call cut short still returns what was
# done) and the summary also lands in $OUT/gpu-check-summary.txt (2 files; the device tool returns up to 8 of 16 MiB).
# Exit status 0 only when every stage ran to completion and every test passed or skipped.
# The stage functions run through `bash -c` (exported), which shellcheck cannot follow:
# shellcheck disable=SC2317
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${ZW_GPU_BUILD_DIR:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
QUICK=${ZW_GPU_QUICK:-0}
REPS=${ZW_GPU_REPS:-${REPS:-3}}
if [ "$QUICK" = 1 ]; then MODE=quick BUDGET=${ZW_GPU_BUDGET_S:-330}; else MODE=full BUDGET=${ZW_GPU_BUDGET_S:-560}; fi
LOG=$BUILD/gpu-check
START=$(date +%s)
DEADLINE=$((START + BUDGET))
STAGE_DEADLINE=$DEADLINE
rm -rf "$LOG"
mkdir -p "$LOG/tests" "$LOG/memcheck"
exec > >(tee -a "$LOG/gpu-check.out") 2>&1
status=0

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then NGPU=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .); fi
export ROOT BUILD QUICK REPS MODE LOG NGPU STAGE_DEADLINE

find_bin() { find "$BUILD" -type f -name "$1" -perm -u+x 2>/dev/null | head -1; }
# bounded CAP CMD...: CMD under timeout, CAP seconds at most and never past the stage's deadline (exit 124 if cut).
bounded() {
  local cap=$1 left=$((STAGE_DEADLINE - $(date +%s)))
  shift
  [ "$left" -lt "$cap" ] && cap=$left
  [ "$cap" -ge 3 ] || return 124
  timeout -k 5 "$cap" "$@"
}
find_sanitizer() {
  local c nvcc
  nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
  for c in "$(command -v compute-sanitizer)" "$(dirname "${nvcc:-.}")/compute-sanitizer" \
           /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}
export -f find_bin bounded find_sanitizer

# ---- stages (each a function run by `stage`, which exports STAGE_DEADLINE) ----

stage_build() {
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$LOG/configure.log" 2>&1 || {
    tail -40 "$LOG/configure.log"; return 2; }
  grep 'zerowire:' "$LOG/configure.log"
  local have t rc=0 first=() second=() missing=() broken=() listed
  have=$(ninja -C "$BUILD" -t targets all 2>/dev/null | sed -n 's/^\([A-Za-z0-9_]*\): phony$/\1/p')
  # What the tests need first (a cut or a broken benchmark then costs no test), the benchmarks second. Besides the
  # targets named here, every ctest entry matching 'cuda|gpu' that is also a target (new GPU tests come along).
  # zw_train is here, not with the benchmarks: the zero3 stage (quick mode too) runs it under zwrun.
  for t in zw_cuda_kernels_test zw_gpu_collectives_test zw_gpu_staged_test zw_gpu_zero_offload_test \
           zw_tensor_cuda_test zw_model_cuda_test zw_gpu_coll_perf zwrun zw_train; do
    if grep -qx "$t" <<<"$have"; then first+=("$t"); else missing+=("$t"); fi
  done
  listed=$(cd "$BUILD" && ctest -N -R 'cuda|gpu' | sed -n 's/^ *Test *#[0-9]*: //p')
  for t in $listed; do
    if grep -qx "$t" <<<"$have" && [[ " ${first[*]} " != *" $t "* ]]; then first+=("$t"); fi
  done
  if [ "$QUICK" != 1 ]; then
    for t in zw_cuda_reduce_bench zw_offload_bench zw_nccl_perf; do
      if grep -qx "$t" <<<"$have"; then second+=("$t"); else missing+=("$t"); fi
    done
  fi
  [ ${#missing[@]} -eq 0 ] || echo "   not in this tree (yet): ${missing[*]}"
  local groups=("${first[*]}" "${second[*]}")
  [ "${ZW_GPU_FULL_BUILD:-0}" = 1 ] && groups=(all)
  for t in "${groups[@]}"; do
    [ -n "$t" ] || continue
    echo "   building: $t"
    # shellcheck disable=SC2086  # a group is a list of target names
    bounded 600 cmake --build "$BUILD" --target $t -- -k 0 >>"$LOG/build.log" 2>&1 || rc=$?
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && return 124
  done
  for t in "${first[@]}" "${second[@]}"; do [ -n "$(find_bin "$t")" ] || broken+=("$t"); done
  printf '%s\n' "${broken[@]}" >"$LOG/not-built.txt"
  if [ ${#broken[@]} -gt 0 ] || [ "$rc" -ne 0 ]; then
    echo "   NOT BUILT: ${broken[*]:-(none, but ninja failed)}; first errors:"
    grep -m5 -E 'error|FAILED' "$LOG/build.log" | cut -c1-300
    return 1
  fi
}

# One GPU's time limit for one ctest entry.
test_limit() {
  case $1 in
    zw_gpu_collectives_test) [ "$QUICK" = 1 ] && echo 75 || echo 150 ;;
    zw_gpu_collectives_ring_test) [ "$QUICK" = 1 ] && echo 60 || echo 120 ;;
    zw_model_cuda_test | zw_train_cuda_test) echo 120 ;;
    zw_tensor_cuda_test) echo 90 ;;
    zw_gpu_ipc_check) echo 45 ;;
    zw_gpu_staged_check_*) echo 30 ;;
    zw_gpu_p2p_test) echo 90 ;;  # ranks as processes: a CUDA context each, per test case
    *) echo 60 ;;
  esac
}
# Fast and independent first; the collectives (many cases, ranks as threads sharing the GPU) last.
test_rank() {
  case $1 in
    zw_gpu_collectives_test) echo 8 ;;
    zw_gpu_collectives_ring_test) echo 9 ;;
    zw_gpu_staged_check_*) echo 5 ;;
    zw_gpu_ipc_check) echo 4 ;;
    zw_gpu_staged_test) echo 3 ;;
    *) echo 1 ;;
  esac
}
stage_tests() {
  export ZW_TEST_PROGRESS=1
  if [ "$QUICK" = 1 ]; then
    export ZW_TEST_TIMEOUT_S=${ZW_TEST_TIMEOUT_S:-20} ZW_TEST_WORLDS=${ZW_TEST_WORLDS:-1,2,3}
    export ZW_TEST_CASES=${ZW_TEST_CASES:-quick}
  else
    export ZW_TEST_TIMEOUT_S=${ZW_TEST_TIMEOUT_S:-30}
  fi
  cd "$BUILD" || return 2
  local names t rc st dt t0 limit worst=0
  names=$(ctest -N -R 'cuda|gpu' | sed -n 's/^ *Test *#[0-9]*: //p' | grep -vx zw_gpu_zero_train_test)  # stage zero3
  [ -n "$names" ] || { echo "   no ctest entry matches 'cuda|gpu'"; return 2; }
  for t in $names; do echo "$(test_rank "$t") $t"; done | sort -s -k1,1n | while read -r _ t; do
    limit=$(test_limit "$t")
    if [ "$QUICK" = 1 ] && [[ $t == zw_gpu_staged_check_*_n[34] ]]; then
      st="not run (quick mode)" dt=0
    elif [ $((STAGE_DEADLINE - $(date +%s))) -lt 5 ]; then
      st="not run (stage budget spent)" dt=0 worst=1
    else
      t0=$(date +%s)
      bounded "$limit" ctest -R "^${t}\$" -V </dev/null >"$LOG/tests/$t.log" 2>&1
      rc=$? dt=$(($(date +%s) - t0))
      if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        st="CUT at $((dt)) s" worst=1
      elif grep -q 'Could not find executable\|Unable to find executable' "$LOG/tests/$t.log"; then
        st="NOT BUILT" worst=1
      elif [ "$rc" -ne 0 ]; then
        st=FAILED worst=1
        grep -q '\*\*\*Timeout' "$LOG/tests/$t.log" && st="FAILED (ctest timeout)"
      elif grep -q '\*\*\*Skipped\|Not Run\|(Disabled)' "$LOG/tests/$t.log"; then
        st=skipped
      else
        st=passed
      fi
    fi
    printf '   %-42s %-28s %4s s (limit %s s)\n' "$t" "$st" "$dt" "$limit"
    printf '%s\t%s\t%s\t%s\n' "$t" "$st" "$dt" "$limit" >>"$LOG/tests.tsv"
    [ "$worst" -eq 0 ] || echo worst >"$LOG/tests.failed"
  done
  [ ! -f "$LOG/tests.failed" ]
}

stage_memcheck() {
  local cs t bin f rc line cap
  if ! cs=$(find_sanitizer); then
    echo "   compute-sanitizer not found: memcheck skipped" | tee "$LOG/memcheck/status.txt"
    return 0
  fi
  echo "   $cs ($("$cs" --version 2>/dev/null | grep -m1 -o 'Version.*'))"
  local worst=0
  for t in zw_cuda_kernels_test zw_tensor_cuda_test; do
    f=$LOG/memcheck/$t.txt
    bin=$(find_bin "$t")
    if [ -z "$bin" ]; then echo "   $t: not built" | tee "$f"; continue; fi
    cap=$([ "$t" = zw_cuda_kernels_test ] && echo 30 || echo 90)
    bounded "$cap" "$cs" --tool memcheck --error-exitcode 86 --print-limit 20 "$bin" >"$f" 2>&1
    rc=$?
    line=$(grep -m1 'ERROR SUMMARY' "$f")
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      line="CUT after $cap s (no summary; $(grep -c '^========= \(Invalid\|Program hit\)' "$f") errors reported so far)"
      worst=124
    elif [ -z "$line" ]; then
      line="no ERROR SUMMARY (exit $rc): $(grep -m1 '^=========' "$f" | cut -c1-200)"
      worst=1
    elif [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
      worst=1
    fi
    echo "   $t: $line (exit $rc)" | tee -a "$LOG/memcheck/status.txt"
  done
  return "$worst"
}

stage_zero3() {
  cd "$BUILD" || return 2
  ctest -N -R '^zw_gpu_zero_train_test$' | grep -q 'Total Tests: 1' || { echo "   zw_gpu_zero_train_test: not built"; return 1; }
  bounded 600 ctest -R '^zw_gpu_zero_train_test$' -V </dev/null >"$LOG/zero3.log" 2>&1
  local rc=$?
  grep -E '^[0-9]+: (parity|seed|resume|kill|timeline|  max|zwrun_gpu_train_test|.*hidden behind)' "$LOG/zero3.log" | cut -c1-240
  return "$rc"
}

stage_multiproc() {
  local zwrun perf algo t f worst=0
  zwrun=$(find_bin zwrun) perf=$(find_bin zw_gpu_coll_perf)
  if [ -z "$zwrun" ] || [ -z "$perf" ]; then echo "   zwrun or zw_gpu_coll_perf not built"; return 1; fi
  for algo in direct ring; do
    for t in allgather reducescatter allreduce; do
      f="$LOG/mp4_${algo}_${t}.txt"
      ZW_CUDA_ALGO=$algo bounded 20 "$zwrun" -n 4 --timeout 18 -- "$perf" -t "$t" -d bfloat16 -b 8K -e 32M -f 16 -n 2 \
        -w 1 -R 1 -c 1 --backends zw >"$f" 2>&1 || { worst=1; echo "   FAILED: 4 ranks $algo $t"; tail -3 "$f"; }
      echo "   4 ranks $algo $t: $(grep -cE '^\[0\] +[0-9]' "$f") sizes, wrong elements:" \
        "$(grep -E '^\[0\] +[0-9]' "$f" | awk -F'|' '{split($2, a, " "); s += a[4]} END {print s + 0}')"
    done
  done
  return "$worst"
}

# run_bin CAP NAME ARGS...: the built program NAME, bounded; "NAME not built" (exit 1) if it is not there.
run_bin() {
  local cap=$1 bin
  bin=$(find_bin "$2")
  if [ -z "$bin" ]; then echo "   $2 not built"; return 1; fi
  shift 2
  bounded "$cap" "$bin" "$@"
}
stage_reduce() { run_bin 20 zw_cuda_reduce_bench | tee "$LOG/reduce_bench.txt"; }
stage_offload() { run_bin 30 zw_offload_bench | tee "$LOG/offload_bench.txt"; }
# bench/train/gpu.sh skips the runs that would not end before its DEADLINE_S and still prints its table: give it the
# stage's budget less a margin. SHAPES defaults to 124m here (gpu.sh's own default, three shapes, takes ~8 min).
stage_train() {
  local left=$((STAGE_DEADLINE - $(date +%s) - 15)) rc
  [ "$left" -ge 30 ] || { echo "   less than 45 s left: not started"; return 124; }
  # One GPU: the flat trainer, the ZeRO-3 engine on one rank and PyTorch. Several: the ZeRO-3 engine against FSDP2
  # (eager and compiled), one rank per GPU. Then, with 75 s left, the seed's offloaded configuration at 4 accumulation
  # steps against the same without offload (one GPU) or against FSDP2's CPUOffloadPolicy (several), and DeepSpeed
  # when DS_WHEELS is given.
  local impls="zw zero3 eager compile" offload="seed seed-noff"
  ((NGPU >= 2)) && impls="zero3 fsdp fsdp-compile" offload="seed fsdp-offload"
  SHAPES=${SHAPES:-124m} IMPLS=${IMPLS:-$impls} NPROC=$NGPU REPS=$REPS DEADLINE_S=$((left - 60)) \
    bounded $((left - 48)) bash "$ROOT/bench/train/gpu.sh" "$BUILD" 2>&1 | tee "$LOG/train_gpu.txt"
  rc=${PIPESTATUS[0]}
  left=$((STAGE_DEADLINE - $(date +%s) - 15))
  [ "$left" -ge 60 ] || { echo "   less than 75 s left: the ZeRO-3 offload pass not started"; return "$rc"; }
  SHAPES=${SHAPES:-124m} ACC=4 IMPLS="$offload${DS_WHEELS:+ ds}" NPROC=$NGPU REPS=1 STEPS=12 WARMUP=3 \
    DEADLINE_S=$left bounded $((left + 12)) bash "$ROOT/bench/train/gpu.sh" "$BUILD" 2>&1 | tee "$LOG/train_zero3.txt"
  local rc2=${PIPESTATUS[0]}
  # A failed or cut pass wins over runs skipped for time (gpu.sh's 75), which win over success.
  case $rc in 0 | 75) ;; *) return "$rc" ;; esac
  case $rc2 in 0 | 75) ;; *) return 1 ;; esac
  [ "$rc" -eq 75 ] || [ "$rc2" -eq 75 ] && return 75
  return 0
}

stage_peercopy() {
  local rep dt worst=0
  for rep in $(seq 1 "$REPS"); do
    for dt in bfloat16 float; do
      run_bin 30 zw_nccl_perf -t peercopy -d "$dt" -b 8K -e 1G -f 4 -n 20 -w 5 -c 0 \
        >"$LOG/peercopy_${dt}_r$rep.txt" 2>&1 || worst=1
    done
  done
  return "$worst"
}

stage_nccl() {
  local zwrun perf t dt f worst=0
  zwrun=$(find_bin zwrun) perf=$(find_bin zw_gpu_coll_perf)
  for t in allgather reducescatter allreduce; do
    for dt in bfloat16 float; do
      f="$LOG/coll_${t}_${dt}.txt"
      bounded 60 "$zwrun" -n "$NGPU" --timeout 58 -- "$perf" -t "$t" -d "$dt" -b 8K -e 1G -f 4 -n 20 -w 5 -c 1 \
        -R "$REPS" >"$f" 2>&1 || { worst=1; echo "   FAILED: $t $dt"; tail -3 "$f"; }
    done
  done
  cat "$LOG/coll_allgather_bfloat16.txt"
  return "$worst"
}

stage_ring() {
  local zwrun perf t f worst=0
  zwrun=$(find_bin zwrun) perf=$(find_bin zw_gpu_coll_perf)
  for t in allgather reducescatter allreduce; do
    f="$LOG/ring_${t}_bfloat16.txt"
    ZW_CUDA_ALGO=ring bounded 40 "$zwrun" -n "$NGPU" --timeout 38 -- "$perf" -t "$t" -d bfloat16 -b 8K -e 1G -f 8 \
      -n 20 -w 5 -c 1 -R 1 >"$f" 2>&1 || { worst=1; echo "   FAILED: ring $t"; tail -3 "$f"; }
  done
  return "$worst"
}
# libzwnccl (issue 19): NVIDIA's nccl-tests on zerowire's NCCL API, checked and beside the system NCCL, and PyTorch's
# "nccl" backend on it by LD_PRELOAD. Its own script does the work (it builds what it needs: with ZW_GPU_SKIP=build
# the build stage only configures), logs in gpu-check/ncclapi/. Only with ZW_GPU_NCCL_API=1.
stage_ncclapi() {
  ZW_NCCL_BUDGET_S=$((STAGE_DEADLINE - $(date +%s) - 5)) ZW_GPU_BUILD_DIR="$BUILD" ZW_NCCL_LOG_DIR="$LOG/ncclapi" \
    OUT="" "$ROOT/tools/nccl-tests-check.sh" >"$LOG/ncclapi.txt" 2>&1
  local rc=$?
  cat "$LOG/ncclapi/summary.txt" 2>/dev/null
  return "$rc"
}
# The torch.distributed backend (issue 18): tests/python/gpu_stage.sh does the work — `pip install --no-index
# --no-build-isolation --no-deps ./python` against this build and the machine's torch (offline; CMake directly where
# pip or setuptools cannot build), then on CUDA tensors, 2 processes sharing GPU 0: the Work semantics, the collectives
# matrix against Gloo, FSDP2 of a GPT-2-small-like model against Gloo, the point-to-point matrix. Only with
# ZW_GPU_TORCH=1 (the full check has no time left).
stage_torch() {
  ZW_TORCH_BUDGET_S=$((STAGE_DEADLINE - $(date +%s) - 5)) "$ROOT/tests/python/gpu_stage.sh" "$BUILD" "$LOG"
}
# The host stages (monitor, hostcpu): tools/gpu-check-host-stages.sh.
# shellcheck source=tools/gpu-check-host-stages.sh
source "$ROOT/tools/gpu-check-host-stages.sh"
export -f stage_monitor stage_hostcpu
export -f run_bin stage_build test_limit test_rank stage_tests stage_memcheck stage_multiproc stage_reduce \
  stage_offload stage_train stage_peercopy stage_nccl stage_ring stage_zero3 stage_ncclapi stage_torch

# ---- the stage runner ----

pack() {
  [ -n "${OUT:-}" ] || return 0
  tar -czf "$BUILD/gpu-check-logs.tar.gz" --warning=no-file-changed -C "$BUILD" gpu-check 2>/dev/null
  [ $? -le 1 ] || return 0  # 1: a log grew while it was read (this script's own output)
  if [ "$(stat -c %s "$BUILD/gpu-check-logs.tar.gz")" -gt $((15 << 20)) ]; then  # the device tool returns <= 16 MiB
    tar -czf "$BUILD/gpu-check-logs.tar.gz" --warning=no-file-changed -C "$BUILD" --exclude='*.log' gpu-check
    echo "   (logs over 15 MiB packed: the *.log files left out of $OUT/gpu-check-logs.tar.gz)"
  fi
  cp "$BUILD/gpu-check-logs.tar.gz" "$OUT/gpu-check-logs.tar.gz.part" &&
    mv "$OUT/gpu-check-logs.tar.gz.part" "$OUT/gpu-check-logs.tar.gz"
}
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$LOG/stages.tsv"; }
skip_stage() { echo "== $1: skipped, $2"; record "$1" "skipped: $2" 0 -; }
# stage NAME CAP: runs stage_NAME with a budget of CAP seconds (less if the deadline is nearer), as a backstop under
# timeout a little longer than that (its commands are bounded by the budget themselves); records ok, FAILED or CUT.
# ZW_GPU_SKIP=name,name skips stages by name.
stage() {
  local name=$1 cap=$2 budget t0 rc st left
  if [[ ,${ZW_GPU_SKIP:-}, == *,$name,* ]]; then skip_stage "$name" "ZW_GPU_SKIP"; return 0; fi
  left=$((DEADLINE - $(date +%s) - 10))
  budget=$((left < cap ? left : cap))
  if [ "$budget" -lt 5 ]; then skip_stage "$name" "no time left"; status=1; return; fi
  echo "== $name (budget $budget s, $(date -u +%T))"
  t0=$(date +%s)
  STAGE_DEADLINE=$((t0 + budget)) timeout -k 5 $((budget + 15)) bash -o pipefail -c "stage_$name"
  rc=$?
  case $rc in
    0) st=ok ;;
    124 | 137) st="CUT (a limit within the $budget s budget)" ;;
    75) st="PARTIAL (what did not fit the budget was skipped)" ;;
    *) st="FAILED (exit $rc)" ;;
  esac
  [ "$rc" -eq 0 ] || [ "$rc" -eq 75 ] || status=1
  echo "   $name: $st, $(($(date +%s) - t0)) s"
  record "$name" "$st" $(($(date +%s) - t0)) "$budget"
  pack
  return "$rc"
}

echo "== info: $(date -u +%FT%TZ) $(hostname), kernel $(uname -r), $(nproc) cores, mode $MODE, budget $BUDGET s," \
  "REPS $REPS"
timeout 20 nvidia-smi -L || true
timeout 20 nvidia-smi --query-gpu=name,driver_version,compute_mode,mig.mode.current,clocks.max.sm --format=csv || true
[ "$NGPU" -gt 1 ] && { timeout 20 nvidia-smi topo -m || true; }
env | grep -E '^CUDA_|^NCCL_' | sort | tr '\n' ' '
echo
echo "   compute-sanitizer: $(find_sanitizer || echo 'not found')"
record info ok $(($(date +%s) - START)) -

stage build 210
if [[ ,${ZW_GPU_SKIP:-}, == *,build,* ]] && [ ! -f "$BUILD/build.ninja" ]; then  # stages that build for themselves
  timeout 120 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$LOG/configure.log" 2>&1 ||
    tail -20 "$LOG/configure.log"
fi
[ -f "$BUILD/build.ninja" ] || { echo "configure failed: nothing to run"; status=1; }
if [ -f "$BUILD/build.ninja" ]; then
  if [ "$QUICK" = 1 ]; then stage tests 200; else stage tests 280; fi
  if [ "$QUICK" = 1 ] && [ "${ZW_GPU_MEMCHECK:-0}" != 1 ]; then
    skip_stage memcheck "quick mode (ZW_GPU_MEMCHECK=1 runs it)"
  else
    stage memcheck 110
  fi
  stage zero3 240
  if [ "$QUICK" != 1 ]; then
    stage multiproc 40
    stage reduce 20
    stage offload 30
    if [ "$NGPU" -ge 2 ]; then
      stage peercopy 60
      stage nccl 240
      stage ring 120
    else
      for s in peercopy nccl ring; do skip_stage "$s" "needs 2 GPUs ($NGPU visible)"; done
    fi
    if [ -f "$ROOT/bench/train/gpu.sh" ]; then stage train 300; else skip_stage train "no bench/train/gpu.sh"; fi
  fi
  if [ "${ZW_GPU_NCCL_API:-0}" = 1 ]; then stage ncclapi 560; else skip_stage ncclapi "ZW_GPU_NCCL_API=1 runs it"; fi
  if [ "${ZW_GPU_TORCH:-0}" = 1 ]; then stage torch 300; else skip_stage torch "ZW_GPU_TORCH=1 runs it"; fi
  if [ "${ZW_GPU_MONITOR:-0}" = 1 ]; then stage monitor 300; else skip_stage monitor "ZW_GPU_MONITOR=1 runs it"; fi
  if [ "${ZW_GPU_HOSTCPU:-0}" = 1 ]; then stage hostcpu 480; else skip_stage hostcpu "ZW_GPU_HOSTCPU=1 runs it"; fi
fi

echo "== summary ($MODE, $NGPU GPU(s), $(($(date +%s) - START)) s of the $BUDGET s budget; logs in $LOG)"
python3 "$ROOT/tools/gpu_check_summary.py" "$LOG" | tee "$LOG/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ -n "${OUT:-}" ]; then cp "$LOG/summary.txt" "$OUT/gpu-check-summary.txt"; pack; fi
exit $status
