#!/usr/bin/env bash
# bench/train/run.sh — training throughput of zw_train vs an equivalent PyTorch eager script (torch_gpt.py).
#
# Usage: bench/train/run.sh [BUILD_DIR]   (default build-train; env: REPS=3 STEPS=6 BATCH=4 THREADS=1)
# Both train the same GPT-2 (6 layers, d_model 256, 8 heads, T 256, byte vocabulary, tied embeddings) with the
# same AdamW, schedule and clipping on the same bytes (the embedded corpus, dumped to a file), with the same thread
# count (zw_train --threads; torch.set_num_threads; OMP_NUM_THREADS and OPENBLAS_NUM_THREADS for both). Runs are
# interleaved A B A B ... so that load from other users of the machine hits both alike. Each run reports the
# median tokens/s over its steps; the summary gives every run, the medians per side and the ratio zw/torch.
# Non-goals: accuracy comparison (see tests/train), GPUs (gpu.sh), multi-process training.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-train}
ZW_TRAIN=$BUILD/tools/zw_train/zw_train
REPS=${REPS:-3}
STEPS=${STEPS:-6}
BATCH=${BATCH:-4}
THREADS=${THREADS:-1}
PYTHON=${PYTHON:-/usr/bin/python3}  # Debian's python3-torch
[ -x "$ZW_TRAIN" ] || { echo "run.sh: $ZW_TRAIN not built (ninja -C $BUILD zw_train)" >&2; exit 1; }
"$PYTHON" -c "import torch" 2>/dev/null || { echo "run.sh: $PYTHON has no torch (apt install python3-torch)" >&2; exit 1; }
CORES=$(nproc --all)  # before OMP_NUM_THREADS is set: nproc honours it
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$ZW_TRAIN" --dump-corpus "$WORK/corpus.txt"
MODEL=(--layers 6 --d-model 256 --heads 8 --seq-len 256 --vocab 256 --batch "$BATCH" --steps "$STEPS"
       --lr 1e-3 --min-lr 1e-4 --warmup-steps 2 --weight-decay 0.1 --grad-clip 1.0 --seed 1337 --threads "$THREADS")

run_zw() {
  rm -rf "$WORK/zw"
  "$ZW_TRAIN" "${MODEL[@]}" --data "$WORK/corpus.txt" --out-dir "$WORK/zw" --eval-every 0 --eval-batches 1 \
    --quiet | sed -n 's/.*median \([0-9.]*\) tokens\/s.*/\1/p'
}
run_torch() {
  "$PYTHON" "$ROOT/bench/train/torch_gpt.py" "${MODEL[@]}" --data "$WORK/corpus.txt" | sed -n 's/^tokens_per_s=//p'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "# train throughput: GPT-2 6L d256 8H T256 V256, batch $BATCH, $STEPS steps/run, $THREADS thread(s), $REPS reps"
echo "# $CORES cores (shared with other users), load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-4s %-8s %14s\n' rep impl tokens_per_s
zw=() torch=()
for ((r = 1; r <= REPS; ++r)); do
  z=$(run_zw); zw+=("$z"); printf '%-4s %-8s %14.1f\n' "$r" zw_train "$z"
  t=$(run_torch); torch+=("$t"); printf '%-4s %-8s %14.1f\n' "$r" torch "$t"
done
zm=$(median "${zw[@]}") tm=$(median "${torch[@]}")
echo "median zw_train $zm tokens/s | median torch $tm tokens/s | ratio zw/torch $(awk -v a="$zm" -v b="$tm" 'BEGIN {printf "%.2f", a / b}')"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
