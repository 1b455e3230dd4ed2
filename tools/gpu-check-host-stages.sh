#!/usr/bin/env bash
# tools/gpu-check-host-stages.sh — the stages of tools/gpu-check.sh that measure host code on the GPU machine's many
# quiet cores (monitor, hostcpu), sourced by it: they use its BUILD, LOG, ROOT and bounded (see its header for what
# each stage runs and when). Not meant to be run alone.
# shellcheck disable=SC2154  # BUILD, LOG and ROOT are gpu-check.sh's

# Monitoring (issue 23): hook cost, the monitor tests (with the device path's records on this GPU), and on/off overhead
# through the collectives benchmarks: small sizes with many paired repetitions (the 1 % goal at 4 KiB), large ones with
# a few (not measurable from 1 MiB). About 4 minutes on 16 quiet cores once the build stage ran.
stage_monitor() {
  local worst=0
  bounded 200 ninja -C "$BUILD" -k 0 zwrun zw_all_gather_perf zw_all_reduce_perf zw_monitor_hook_bench zw_monitor_ab \
    zw_monitor_probe zw_monitor_unit_test zw_monitor_comm_test zw_monitor_device_ops_test zw_monitor_gpu_test \
    zw_store_endpoints \
    >"$LOG/monitor_build.txt" 2>&1 || { echo "   build FAILED:"; tail -15 "$LOG/monitor_build.txt"; return 1; }
  bounded 60 "$BUILD/bench/monitor/zw_monitor_hook_bench" | tee "$LOG/monitor.txt"
  # On against off paired in one process (two communicators, the same buffers): no launch-to-launch variance.
  local c n
  for c in all_gather all_reduce; do
    for n in 2 4; do
      bounded 40 "$BUILD/tools/zwrun" -n "$n" -- "$BUILD/bench/monitor/zw_monitor_ab" -c "$c" -b 4K -r 41 2>&1 |
        grep -v '^$' | tee -a "$LOG/monitor.txt"
    done
  done
  (cd "$BUILD" && bounded 150 ctest -L monitor -j2 --output-on-failure) >"$LOG/monitor_tests.txt" 2>&1 || worst=1
  grep -E "tests passed|Failed|Not Run|Skipped|\*\*\*" "$LOG/monitor_tests.txt" | head -20
  grep -E "^\[ *(OK|FAILED|SKIPPED) *\] MonitorGpu" "$LOG/monitor_tests.txt" | head -5
  bounded 150 python3 "$ROOT/bench/monitor/overhead.py" "$BUILD" --reps 9 -b 4K -e 256K --iters 500 \
    | tee -a "$LOG/monitor.txt" || worst=1
  bounded 120 python3 "$ROOT/bench/monitor/overhead.py" "$BUILD" --reps 3 -b 1M -e 64M --iters 20 \
    | tee -a "$LOG/monitor.txt" || worst=1
  return "$worst"
}

stage_hostcpu() {
  local worst=0 py n
  bounded 200 ninja -C "$BUILD" -k 0 zwrun zw_all_gather_perf zw_reduce_scatter_perf zw_all_reduce_perf \
    >"$LOG/hostcpu_build.txt" 2>&1 || { echo "   build FAILED:"; tail -15 "$LOG/hostcpu_build.txt"; return 1; }
  bounded 150 python3 "$ROOT/bench/host_threads.py" "$BUILD" --threads 1 4 | tee "$LOG/hostcpu.txt" || worst=1
  # Through torch.distributed too, where the torch stage installed the package (ZW_GPU_TORCH=1 before this stage).
  py=${ZW_TORCH_PYTHON:-$(command -v python3)}
  [ -x /opt/torch/.venv/bin/python3 ] && [ -z "${ZW_TORCH_PYTHON:-}" ] && py=/opt/torch/.venv/bin/python3
  if [ -d "$BUILD/python/site/zerowire" ]; then
    for n in 2 4; do
      echo "-- torch against Gloo, world $n, defaults" | tee -a "$LOG/hostcpu.txt"
      PYTHONPATH="$BUILD/python/site" OMP_NUM_THREADS=1 bounded 120 "$py" "$ROOT/bench/torch/bench_collectives.py" \
        --world "$n" --min 64K --max 64M --reps 3 --variants raw 2>&1 | grep -E '^(all|reduce)' |
        tee -a "$LOG/hostcpu.txt" || worst=1
      echo "-- torch all_reduce against Gloo, world $n, ZW_HOST_THREADS=1" | tee -a "$LOG/hostcpu.txt"
      ZW_HOST_THREADS=1 PYTHONPATH="$BUILD/python/site" OMP_NUM_THREADS=1 bounded 60 "$py" \
        "$ROOT/bench/torch/bench_collectives.py" --world "$n" --min 1M --max 64M --reps 3 --ops all_reduce \
        --variants raw 2>&1 | grep -E '^all_reduce' | tee -a "$LOG/hostcpu.txt" || worst=1
      echo "-- torch FSDP2 CPU training step, zerowire against Gloo, world $n" | tee -a "$LOG/hostcpu.txt"
      PYTHONPATH="$BUILD/python/site" OMP_NUM_THREADS=1 bounded 60 "$py" "$ROOT/bench/torch/bench_fsdp.py" \
        --world "$n" 2>&1 | tail -3 | tee -a "$LOG/hostcpu.txt" || worst=1
      echo "-- where a torch call's time goes, world $n" | tee -a "$LOG/hostcpu.txt"
      PYTHONPATH="$BUILD/python/site" OMP_NUM_THREADS=1 bounded 60 "$py" "$ROOT/bench/torch/call_anatomy.py" \
        --world "$n" --sizes 1M 4M --ops reduce_scatter_tensor all_reduce --variants torch fake py raw --reps 5 2>&1 |
        grep -E '^(all|reduce)' | tee -a "$LOG/hostcpu.txt" || worst=1
    done
  else
    echo "   torch: no package in $BUILD/python/site (run with ZW_GPU_TORCH=1): left out" | tee -a "$LOG/hostcpu.txt"
  fi
  return "$worst"
}
