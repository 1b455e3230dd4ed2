#!/usr/bin/env bash
# tools/gpu-check.sh — the GPU check of zerowire, run on a machine with NVIDIA GPUs (e.g. the device tool's
# nvidia-h200-x2: run(command="tools/gpu-check.sh", kind="nvidia-h200-x2")).
#
# 1. configures the project with CUDA (Release, Ninja) into build-gpu/ and builds the GPU targets with their
#    dependencies (zw_cuda_kernels_test, zw_cuda_reduce_bench, zw_nccl_perf; ZW_GPU_FULL_BUILD=1 builds all);
# 2. runs the GPU tests (ctest -R 'cuda|gpu') and the CUDA reduce-kernel bandwidth check;
# 3. runs zw_nccl_perf on all visible GPUs for allgather, reducescatter, allreduce and the peer-copy reference in
#    bf16 and f32 from 8 KiB to 1 GiB (-f 2, so every x4 step from 8 KiB plus 1 GiB), interleaved and repeated
#    ZW_GPU_REPS times (default 3; the first repetition validates every size, the others only time);
# 4. prints, last, a summary of the medians: op, dtype, size, NCCL time and busbw, peer-copy busbw.
# Logs go to build-gpu/gpu-check (and, packed, to $OUT/gpu-check-logs.tar.gz when the device tool's $OUT is set).
# NVLink multicast (NVLS) is disabled for every program started here. Exit status: non-zero if the build, a test or a validation failed.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

cd "$(dirname "$0")/.." || exit 1
BUILD=${ZW_GPU_BUILD_DIR:-build-gpu}
REPS=${ZW_GPU_REPS:-3}
LOG=$BUILD/gpu-check
mkdir -p "$LOG"
status=0

echo "== machine: $(date -u +%FT%TZ) $(hostname)"
nvidia-smi -L || true
nvidia-smi topo -m || true

echo "== configure and build ($BUILD)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$LOG/configure.log" 2>&1 || {
  tail -40 "$LOG/configure.log"; exit 1; }
grep 'zerowire:' "$LOG/configure.log"
targets=(zw_cuda_kernels_test zw_cuda_reduce_bench zw_nccl_perf)
[ "${ZW_GPU_FULL_BUILD:-0}" = 1 ] && targets=(all)
cmake --build "$BUILD" --target "${targets[@]}" >"$LOG/build.log" 2>&1 || { grep -B2 -A20 -m3 'error' "$LOG/build.log"; exit 1; }

echo "== GPU tests"
(cd "$BUILD" && ctest -R 'cuda|gpu' -V) >"$LOG/ctest.log" 2>&1 || status=1
grep -E '\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]|tests passed|tests failed|Test +#' "$LOG/ctest.log" | tail -20
find_bin() { find "$BUILD" -type f -name "$1" -perm -u+x | head -1; }

echo "== CUDA reduce kernels vs device-to-device copy"
"$(find_bin zw_cuda_reduce_bench)" | tee "$LOG/reduce_bench.txt" || status=1

echo "== NCCL anchor and peer-copy reference ($REPS repetitions, interleaved)"
perf=$(find_bin zw_nccl_perf)
for rep in $(seq 1 "$REPS"); do
  check=0
  [ "$rep" = 1 ] && check=1
  for dt in bfloat16 float; do
    for t in allgather reducescatter allreduce peercopy; do
      f="$LOG/${t}_${dt}_r${rep}.txt"
      "$perf" -t "$t" -d "$dt" -o sum -b 8K -e 1G -f 2 -n 20 -w 5 -c "$check" >"$f" 2>&1 || {
        status=1; echo "FAILED: $t $dt rep $rep"; tail -5 "$f"; }
    done
  done
  echo "   repetition $rep done"
done
cat "$LOG"/allgather_bfloat16_r1.txt

echo "== summary (medians of $REPS; busbw GB/s out-of-place, time us; peer copy = cudaMemcpyPeerAsync push)"
python3 - "$LOG" "$REPS" <<'PY'
import glob, os, statistics, sys
log, reps = sys.argv[1], int(sys.argv[2])
rows = {}  # (test, dtype, size) -> list of (us, busbw, wrong)
for path in glob.glob(os.path.join(log, "*_r*.txt")):
    test, dtype, _ = os.path.basename(path)[:-4].rsplit("_", 2)
    for line in open(path):
        f = line.split()
        if not f or line.startswith("#") or len(f) != 13 or not f[0].isdigit():
            continue
        wrong = sum(int(x) for x in (f[8], f[12]) if x.lstrip("-").isdigit())
        rows.setdefault((test, dtype, int(f[0])), []).append((float(f[5]), float(f[7]), wrong))
med = lambda k, i: statistics.median(v[i] for v in rows[k]) if k in rows else float("nan")
sizes = [8 << 10, 2 << 20, 8 << 20, 32 << 20, 128 << 20, 512 << 20, 1 << 30]
name = lambda s: f"{s >> 30} GiB" if s >= 1 << 30 else f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
print(f"{'op':<14}{'dtype':<10}{'size':>9}{'NCCL us':>11}{'NCCL busbw':>12}{'peer busbw':>12}{'wrong':>7}")
for test in ("allgather", "reducescatter", "allreduce"):
    for dtype in ("bfloat16", "float"):
        for s in sizes:
            k = (test, dtype, s)
            wrong = sum(v[2] for v in rows.get(k, []))
            print(f"{test:<14}{dtype:<10}{name(s):>9}{med(k, 0):>11.2f}{med(k, 1):>12.2f}"
                  f"{med(('peercopy', dtype, s), 1):>12.2f}{wrong:>7}")
PY
[ -n "${OUT:-}" ] && tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$BUILD" gpu-check
exit $status
