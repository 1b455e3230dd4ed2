#!/usr/bin/env bash
# The main job on embedded defaults, after installing what is missing and building (Release) into build/:
#   1. collectives: 4 local ranks over shared memory, all-gather and reduce-scatter from 1 KiB to 64 MiB
#      (nccl-tests columns), launched with zwrun;
#   2. training: the reference GPT-2 (4 layers, d_model 128) on the embedded generated corpus — no download —
#      with ZeRO-3 across 4 local ranks (zwrun; parameters, gradients and Adam state sharded, fp16 with dynamic
#      loss scaling, CPU-offloaded optimizer: tools/zw_train/ds_zero3_demo.json), then the loss curve as a PNG
#      and a sample of generated text from the sharded checkpoint.
set -euo pipefail
cd "$(dirname "$0")"

tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"

for bench in zw_all_gather_perf zw_reduce_scatter_perf; do
  echo "== $bench: 4 ranks, shm"
  build/tools/zwrun -n 4 --transport shm -- "build/bench/$bench" -b 1K -e 64M -f 4
done

out=build/demo-train
rm -rf "$out"
echo "== zw_train: GPT-2 4L d128 on the embedded corpus, ZeRO-3 on 4 ranks over shm (400 steps)"
build/tools/zwrun -n 4 --transport shm -- build/tools/zw_train/zw_train --steps 400 --log-every 50 --eval-every 100 \
  --out-dir "$out" --deepspeed_config tools/zw_train/ds_zero3_demo.json
tools/plot_loss "$out/metrics.jsonl" "$out/loss.png"
echo "== loss curve: $out/loss.png"
echo "== sample from the sharded checkpoint (prompt \"the \"):"
build/tools/zw_train/zw_train --sample --ckpt "$out/ckpt_zero" --prompt "the " --tokens 300 --temperature 0.8
