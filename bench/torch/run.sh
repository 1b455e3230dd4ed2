#!/usr/bin/env bash
# The torch.distributed benchmarks of docs/PERF.md ("torch.distributed backend"): zerowire against Gloo through
# torch.distributed (2 and 4 processes, 4 KiB - 64 MiB, with zerowire also timed straight from C++ and on huge-page
# tensors, interleaved), the binding's overhead against zerowire's own zw_*_perf from 1 MiB, and the FSDP2 CPU step
# time.
#   bench/torch/run.sh [BUILD_DIR]      (default build; needs the targets zwrun and zw_*_perf, and python/site from
#                                        the torch_pip_install test or `pip install --target BUILD_DIR/python/site`)
#   TORCH_THP=1 also times zerowire and Gloo from 1 MiB with THP_MEM_ALLOC_ENABLE=1 (torch_thpenv_n{2,4}.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}")
py=$(tools/torch-env.sh)
out=$build/bench-torch
mkdir -p "$out"
export PYTHONPATH=$build/python/site OMP_NUM_THREADS=1
for n in 2 4; do
  "$py" bench/torch/bench_collectives.py --world "$n" --json "$out/torch_n$n.json"
  for op in all_gather reduce_scatter all_reduce; do
    "$build/tools/zwrun" -n "$n" -- "$build/bench/zw_${op}_perf" -b 1M -e 64M -f 4 -d float -o sum -n 20 -w 5 \
      > "$out/zw_${op}_n$n.txt"
  done
done
"$py" bench/torch/overhead.py "$out"
if [ "${TORCH_THP:-0}" = 1 ]; then  # torch's own huge-page switch for its allocations of >= 2 MiB, tensors as before
  for n in 2 4; do
    THP_MEM_ALLOC_ENABLE=1 "$py" bench/torch/bench_collectives.py --world "$n" --min 1M --variants \
      --json "$out/torch_thpenv_n$n.json"
  done
fi
for n in 2 4; do "$py" bench/torch/bench_fsdp.py --world "$n"; done
