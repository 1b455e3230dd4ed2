#!/usr/bin/env bash
# Builds zerowire (Release) into build/ and runs the demo: a 4-rank all-gather and reduce-scatter sweep from
# 1 KiB to 64 MiB over the shm transport, launched with zwrun (nccl-tests style columns).
set -euo pipefail
cd "$(dirname "$0")"

tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"

for bench in zw_all_gather_perf zw_reduce_scatter_perf; do
  if [ ! -x "build/bench/$bench" ]; then
    echo "demo: build/bench/$bench was not built (is bench/CMakeLists.txt adding it?)" >&2
    exit 1
  fi
  echo "== $bench: 4 ranks, shm"
  build/tools/zwrun -n 4 --transport shm -- "build/bench/$bench" -b 1K -e 64M -f 4
done
