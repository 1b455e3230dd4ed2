#!/usr/bin/env bash
# tools/gpu-check.sh — the GPU check of zerowire, run on a machine with NVIDIA GPUs (e.g. the device tool's
# nvidia-h200-x2: run(command="tools/gpu-check.sh", kind="nvidia-h200-x2")).
#
# 1. configures the project with CUDA (Release, Ninja) into build-gpu/ and builds the GPU targets with their
#    dependencies (ZW_GPU_FULL_BUILD=1 builds all);
# 2. runs the GPU tests (ctest -R 'cuda|gpu': the CUDA kernels bit for bit, every collective on device memory with
#    1-8 ranks as threads against a host reference, a 2-process CUDA-IPC run under zwrun, the staged path as
#    processes, and the ZeRO-3 offload pipeline's device path bit for bit against its host path);
# 3. runs the CUDA reduce-kernel bandwidth check, the ZeRO-3 offload pipeline's hidden-copy benchmark
#    (zw_offload_bench) and the peer-copy physical reference (zw_nccl_perf -t peercopy);
# 4. runs zw_gpu_coll_perf under zwrun, one process per GPU: zerowire and NCCL interleaved in one harness for
#    allgather, reducescatter and allreduce in bf16 and f32 from 8 KiB to 1 GiB, ZW_GPU_REPS repetitions (default 3);
#    then the same with ZW_CUDA_ALGO=ring (bf16, one repetition) to compare the ring kernels with the direct ones;
# 5. prints, last, the summary: op, dtype, size, zerowire and NCCL busbw (medians), the ratio, peer-copy busbw,
#    and the ring table (ring busbw, direct busbw from step 4, NCCL busbw).
# ZW_GPU_QUICK=1 stops after the tests (for iterating on correctness).
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
targets=(zw_cuda_kernels_test zw_gpu_collectives_test zw_gpu_staged_test zw_gpu_zero_offload_test zw_cuda_reduce_bench
         zw_offload_bench zw_nccl_perf zw_gpu_coll_perf zwrun)
[ "${ZW_GPU_FULL_BUILD:-0}" = 1 ] && targets=(all)
cmake --build "$BUILD" --target "${targets[@]}" >"$LOG/build.log" 2>&1 || { grep -B2 -A20 -m3 'error' "$LOG/build.log"; exit 1; }
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$NGPU" -ge 1 ] || NGPU=1

echo "== GPU tests"
(cd "$BUILD" && ctest -R 'cuda|gpu' -V) >"$LOG/ctest.log" 2>&1 || status=1
grep -E '\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]|tests passed|tests failed|Test +#' "$LOG/ctest.log" | tail -20
find_bin() { find "$BUILD" -type f -name "$1" -perm -u+x | head -1; }

[ "${ZW_GPU_QUICK:-0}" = 1 ] && { [ -n "${OUT:-}" ] && tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$BUILD" gpu-check; exit $status; }

echo "== multi-process, more ranks than GPUs: 4 processes on $NGPU GPU(s), direct and ring, every size validated"
for algo in direct ring; do
  for t in allgather reducescatter allreduce; do
    f="$LOG/mp4_${algo}_${t}.txt"
    ZW_CUDA_ALGO=$algo "$(find_bin zwrun)" -n 4 --timeout 300 -- "$(find_bin zw_gpu_coll_perf)" -t "$t" -d bfloat16 \
      -b 8K -e 32M -f 16 -n 2 -w 1 -R 1 -c 1 --backends zw >"$f" 2>&1 || { status=1; echo "FAILED: 4 ranks $algo $t"; tail -5 "$f"; }
    echo "   4 ranks $algo $t: $(grep -cE '^\[0\] +[0-9]' "$f") sizes, wrong elements: $(grep -E '^\[0\] +[0-9]' "$f" | awk -F'|' '{split($2, a, " "); s += a[4]} END {print s + 0}')"
  done
done

echo "== CUDA reduce kernels vs device-to-device copy"
"$(find_bin zw_cuda_reduce_bench)" | tee "$LOG/reduce_bench.txt" || status=1

echo "== ZeRO-3 offloaded optimizer: copies down/up hidden behind the host Adam update (100M parameters, bf16)"
"$(find_bin zw_offload_bench)" | tee "$LOG/offload_bench.txt" || status=1

echo "== peer-copy reference (cudaMemcpyPeerAsync push, no synchronization; $REPS repetitions)"
for rep in $(seq 1 "$REPS"); do
  for dt in bfloat16 float; do
    "$(find_bin zw_nccl_perf)" -t peercopy -d "$dt" -b 8K -e 1G -f 4 -n 20 -w 5 -c 0 >"$LOG/peercopy_${dt}_r$rep.txt" 2>&1 || status=1
  done
done

echo "== zerowire vs NCCL: zw_gpu_coll_perf on $NGPU GPU(s), one process each, $REPS interleaved repetitions"
zwrun=$(find_bin zwrun)
perf=$(find_bin zw_gpu_coll_perf)
for t in allgather reducescatter allreduce; do
  for dt in bfloat16 float; do
    f="$LOG/coll_${t}_${dt}.txt"
    "$zwrun" -n "$NGPU" --timeout 300 -- "$perf" -t "$t" -d "$dt" -b 8K -e 1G -f 4 -n 20 -w 5 -c 1 -R "$REPS" >"$f" 2>&1 || {
      status=1; echo "FAILED: $t $dt"; tail -5 "$f"; }
  done
done
cat "$LOG/coll_allgather_bfloat16.txt"

echo "== ring kernels: ZW_CUDA_ALGO=ring beside NCCL (bf16, 1 repetition), for the ring-vs-direct choice"
for t in allgather reducescatter allreduce; do
  f="$LOG/ring_${t}_bfloat16.txt"
  ZW_CUDA_ALGO=ring "$zwrun" -n "$NGPU" --timeout 300 -- "$perf" -t "$t" -d bfloat16 -b 8K -e 1G -f 8 -n 20 -w 5 -c 1 \
    -R 1 >"$f" 2>&1 || { status=1; echo "FAILED: ring $t"; tail -5 "$f"; }
done

echo "== summary (busbw GB/s, medians; zw/nccl = ratio of medians; peer = cudaMemcpyPeerAsync push reference)"
python3 - "$LOG" <<'PY'
import glob, os, re, statistics, sys
log = sys.argv[1]
peer = {}
for path in glob.glob(os.path.join(log, "peercopy_*_r*.txt")):
    dtype = os.path.basename(path).split("_")[1]
    for line in open(path):
        f = line.split()
        if len(f) == 13 and f[0].isdigit():
            peer.setdefault((dtype, int(f[0])), []).append(float(f[7]))
name = lambda s: f"{s >> 30} GiB" if s >= 1 << 30 else f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
print(f"{'op':<14}{'dtype':<10}{'size':>9}{'zw us':>10}{'zw busbw':>10}{'nccl us':>10}{'nccl busbw':>11}{'zw/nccl':>9}"
      f"{'peer':>8}{'wrong':>7}{'zw enq':>8}")
for t in ("allgather", "reducescatter", "allreduce"):
    for dt in ("bfloat16", "float"):
        path = os.path.join(log, f"coll_{t}_{dt}.txt")
        if not os.path.exists(path):
            continue
        for line in open(path):
            line = re.sub(r"^\[\d+\]\s*", "", line)
            f = line.replace("|", " ").split()
            if len(f) < 15 or not f[0].isdigit():
                continue
            size = int(f[0])
            zw_us, zw_bw, zw_wrong = float(f[4]), float(f[5]), int(f[7])
            nc_us, nc_bw, nc_wrong = float(f[8]), float(f[9]), int(f[11])
            p = statistics.median(peer[(dt, size)]) if (dt, size) in peer else float("nan")
            print(f"{t:<14}{dt:<10}{name(size):>9}{zw_us:>10.2f}{zw_bw:>10.1f}{nc_us:>10.2f}{nc_bw:>11.1f}"
                  f"{float(f[12]):>9.3f}{p:>8.1f}{max(zw_wrong, 0) + max(nc_wrong, 0):>7}{float(f[13]):>8.2f}")
def rows(path):
    for line in open(path):
        f = re.sub(r"^\[\d+\]\s*", "", line).replace("|", " ").split()
        if len(f) >= 15 and f[0].isdigit():
            yield int(f[0]), float(f[5]), float(f[9])
print(f"\n{'ring op':<14}{'size':>9}{'ring busbw':>12}{'direct busbw':>14}{'nccl busbw':>12}")
for t in ("allgather", "reducescatter", "allreduce"):
    ring_path, direct_path = os.path.join(log, f"ring_{t}_bfloat16.txt"), os.path.join(log, f"coll_{t}_bfloat16.txt")
    if not os.path.exists(ring_path) or not os.path.exists(direct_path):
        continue
    direct = {size: bw for size, bw, _ in rows(direct_path)}
    for size, bw, nccl in rows(ring_path):
        print(f"{t:<14}{name(size):>9}{bw:>12.1f}{direct.get(size, float('nan')):>14.1f}{nccl:>12.1f}")
PY
[ -n "${OUT:-}" ] && tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$BUILD" gpu-check
exit $status
