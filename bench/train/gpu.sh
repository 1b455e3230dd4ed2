#!/usr/bin/env bash
# bench/train/gpu.sh — training throughput: zw_train against PyTorch eager and torch.compile on one GPU, and
# zw_train's ZeRO-3 engine on NPROC ranks against the flat trainer, against PyTorch FSDP2 on as many ranks and
# against DeepSpeed with the same JSON.
#
# Usage: bench/train/gpu.sh [BUILD_DIR]   (default build-gpu, a CUDA build: cmake -B build-gpu -G Ninja
#        -DCMAKE_BUILD_TYPE=Release && ninja -C build-gpu zw_train)
# Env:   REPS=3 STEPS=30 WARMUP=5 SHAPES="124m 1.3b 1.3b-t4096" IMPLS="zw eager compile" PYTHON=python3
#        PEAK_TFLOPS=989.4 DEADLINE_S=540 RUN_TIMEOUT_S=300 ZW_TRAIN=<BUILD>/tools/zw_train/zw_train ZW_ARGS=
#        TORCH_ARGS= LOG_DIR= (keep every run's log there) RESULTS_CSV= (one row per run) WORK_DIR=${TMPDIR:-/tmp}
#        TORCHINDUCTOR_CACHE_DIR=<BUILD>/torchinductor-cache (kept between calls, so a second call compiles fast)
#        ACC=1 (gradient accumulation steps of the ZeRO-3 impls) ZWRUN=<BUILD>/tools/zwrun
#        DS_WHEELS= (a folder of the deepspeed 0.19.8 sdist and the wheels it lacks: installed with pip --target into
#        DS_SITE=<BUILD>/ds-site, offline, when IMPLS has ds and python cannot import deepspeed)
#        NPROC=1 (ranks of the ZeRO-3 and FSDP2 impls, one per GPU while there are GPUs, then sharing them)
#        FSDP_BACKEND=nccl (the FSDP2 impls' process group backend: nccl, gloo, zerowire — which needs the package on
#        PYTHONPATH — or, through LD_PRELOAD of zerowire's libzwnccl set by the caller, nccl again)
#
# What is compared. The same GPT-2 (pre-norm, learned positions, tied LM head without bias, tanh GELU, layernorm
# eps 1e-5, biases on the other linears; AdamW betas 0.9/0.95 eps 1e-8 with decay on the dim>=2 tensors, grad clip
# 1.0, warmup + cosine LR) with the same shapes and the same tokens: a synthetic llm.c shard written once (below),
# from which both sides draw windows of T+1 tokens (targets = inputs shifted by one) with zw_train's own SplitMix
# generator and seed, so every step of every implementation trains on the same batch.
#   zw      zw_train --device cuda --dtype bf16 ...   (zerowire's trainer; its own GPU kernels)
#   eager   torch_gpt.py --device cuda --compile 0    fp32 master weights, torch.autocast(bf16), SDPA
#                                                     (is_causal=True), AdamW(fused=True), TF32 on for what stays fp32
#   compile torch_gpt.py --device cuda --compile 1    the same with the model (forward + loss) in torch.compile
# and the ZeRO-3 engine (issue 17), NPROC ranks under zwrun, micro-batch B per rank, ACC accumulation steps (B x ACC
# x NPROC sequences per optimizer step), each with a DeepSpeed JSON written here:
#   zero3     bf16, stage 3, overlap_comm, contiguous_gradients, optimizer on the GPU  (against zw: the engine's cost)
#   seed      the seed's configuration: fp16 with dynamic loss scaling, offload_optimizer cpu + pin_memory,
#             overlap_comm, contiguous_gradients, stage 3 (train_batch_size B x ACC instead of 512)
#   seed-noff the same without offload_optimizer (the offloaded step's cost: seed / seed-noff)
#   ds        ds_gpt.py: DeepSpeed 0.19.8 with the seed JSON (DeepSpeedCPUAdam), torch_gpt.py's model
#   ds-noff   the same with the seed-noff JSON, ds-zero3 with zero3's (optimizer on the GPU: torch's fused AdamW,
#             as ds_gpt.py says why)
#   Every JSON also says "gradient_clipping": 1.0, so that both sides clip.
# and PyTorch FSDP2 on the same NPROC ranks, batches and accumulation (fsdp_gpt.py under torchrun, FSDP_BACKEND):
#   fsdp         fully_shard per block and at the root, bf16 parameters, fp32 reduce, fused AdamW (against zero3)
#   fsdp-compile the same with each block in torch.compile                                  (against zero3)
#   fsdp-offload the same as fsdp with CPUOffloadPolicy: AdamW on the host                  (against seed)
# Shapes (vocabulary 50304 = 50257 padded to a multiple of 128, as llm.c and nanoGPT do):
#   124m        GPT-2 small: L12 d768 12 heads, T 1024, B 16  (16384 tokens/step)
#   1.3b        L24 d2048 16 heads, T 1024, B 8                 (8192 tokens/step)
#   1.3b-t4096  the same model at T 4096 with B 2: the same 8192 tokens per step as B 8 at T 1024
#   tiny        L2 d128 4 heads, T 256, B 4 (a seconds-long smoke test); or any L:C:H:T:B, e.g. 12:768:12:1024:8
# Runs are interleaved zw eager compile zw eager compile ... REPS times per shape, so that a drift of the machine
# (clocks, temperature, other tenants) hits every implementation alike; each run is its own process.
#
# Warm-up and timing. Each side times every step from batch sampling to the end of the optimizer step and reports
# the median tokens/s. torch_gpt.py closes each step with torch.cuda.synchronize() and leaves its first WARMUP
# steps out (torch.compile compiles forward and backward inside the first one: that time is printed as "compile"
# and is not in the figure); zw_train has no such switch and takes the median over all STEPS steps, which
# discounts its slow first step as long as fewer than half the steps are slow. Peak memory: torch's
# max_memory_allocated (tensors only; the caching allocator's reserve and the CUDA context are not in it, the
# per-run line also gives max_memory_reserved); zw_train's "peak device memory", the high-water mark of the bytes
# its own allocator hands out (parameters, optimizer state, activations and workspaces; no CUDA context either).
#
# MFU, the same for every row: tokens/s x (6 N + 12 L C T) / peak, N the parameter count including the embeddings
# (wte once, as it is tied, and wpe) — the PaLM paper's appendix B / llm.c convention (12 L C T: the attention
# score and value matmuls, forward and backward, not halved for causality) — against PEAK_TFLOPS, 989.4 TFLOP/s:
# the dense bf16 tensor-core peak of an H200 SXM (NVIDIA's datasheet, 1979 with sparsity). The table computes
# it from the median; the per-run lines also show each program's own figure.
#
# The shard: python3 with the standard library only (random.Random(1337).randbytes; each 16-bit value v becomes
# v * 50257 >> 16, so tokens are in [0, 50257) and nearly uniform), 256 int32 header words (magic 20240520,
# version 1, token count) then little-endian uint16 tokens: max(2^20, 10/9 x the largest B x (T+1) x STEPS)
# tokens, so that the training windows (the first 90 %, zw_train's split) hardly repeat.
#
# Wall time (one H200, REPS=1, STEPS=30; estimates before the first GPU run, the script prints the measured
# ones): zw ~15 s / ~35 s / ~40 s for 124m / 1.3b / 1.3b-t4096 (zw_train writes its end-of-run checkpoint:
# ~16 GB for 1.3B, deleted right after), eager ~15 / ~25 / ~30 s, compile ~75 / ~120 / ~120 s with a cold
# inductor cache (~25-40 s warm): about 8 minutes cold, 5 warm. A device call has 10 minutes, so no run starts
# after DEADLINE_S (540 s) — those show "skipped" — and none runs past it (each gets at most what is left,
# and at most RUN_TIMEOUT_S). With REPS=3, give each shape its own call once a REPS=1 pass has warmed the
# inductor cache: SHAPES=1.3b REPS=3 bench/train/gpu.sh (~5 minutes).
#
# Robustness: a run that fails or times out prints its last lines and shows "failed"/"timeout" in the table; the
# comparison goes on. Exit status: 0 when every run ran, 75 when the only missing runs were skipped for the
# deadline, 1 when one failed or timed out. Non-goals: accuracy (tests/train, tests/python), several hosts, CUDA
# graphs.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${1:-${BUILD:-$ROOT/build-gpu}}
ZW_TRAIN=${ZW_TRAIN:-$BUILD/tools/zw_train/zw_train}
TORCH_GPT=$HERE/torch_gpt.py
PYTHON=${PYTHON:-python3}
REPS=${REPS:-3}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
SHAPES=${SHAPES:-124m 1.3b 1.3b-t4096}
IMPLS=${IMPLS:-zw eager compile}
DEADLINE_S=${DEADLINE_S:-540}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-300}
MIN_RUN_S=${MIN_RUN_S:-20}  # no run starts with less than this left before DEADLINE_S
ZW_ARGS=${ZW_ARGS:-}
export -n ZW_ARGS  # a bench setting, not a zerowire knob: keep it out of zw_train's environment (unknown-knob warning)
TORCH_ARGS=${TORCH_ARGS:-}
LOG_DIR=${LOG_DIR:-}
RESULTS_CSV=${RESULTS_CSV:-}
export PEAK_TFLOPS=${PEAK_TFLOPS:-989.4}
export PYTHONUNBUFFERED=1
VOCAB=50304     # GPT-2's 50257 padded to a multiple of 128
TOKEN_RANGE=50257
SEED=1337
START=$SECONDS

die() { echo "gpu.sh: $*" >&2; exit 2; }
shape_dims() {  # SHAPE -> "L C H T B"
  case $1 in
    124m) echo "12 768 12 1024 16" ;;
    1.3b) echo "24 2048 16 1024 8" ;;
    1.3b-t4096) echo "24 2048 16 4096 2" ;;
    tiny) echo "2 128 4 256 4" ;;
    *:*:*:*:*)
      local IFS=:
      # shellcheck disable=SC2086  # split L:C:H:T:B at the colons
      set -- $1
      [ $# -eq 5 ] && echo "$1 $2 $3 $4 $5" ;;
    *) return 1 ;;
  esac
}
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
for v in REPS STEPS WARMUP DEADLINE_S RUN_TIMEOUT_S MIN_RUN_S; do is_uint "${!v}" || die "$v=${!v} is not a number"; done
((REPS >= 1)) || die "REPS must be at least 1"
((WARMUP < STEPS)) || die "WARMUP=$WARMUP leaves no timed step of STEPS=$STEPS"
((2 * WARMUP < STEPS)) || echo "gpu.sh: warning: WARMUP=$WARMUP is not under half of STEPS=$STEPS; zw_train's median counts every step" >&2
for s in $SHAPES; do
  d=$(shape_dims "$s") || die "unknown shape '$s' (124m, 1.3b, 1.3b-t4096, tiny or L:C:H:T:B)"
  for x in $d; do
    if ! is_uint "$x" || ((x == 0)); then die "shape '$s': '$x' is not a positive number"; fi
  done
done
for i in $IMPLS; do
  case $i in
    zw | eager | compile | zero3 | seed | seed-noff | ds | ds-noff | ds-zero3 | fsdp | fsdp-compile | fsdp-offload) ;;
    *) die "unknown impl '$i' (IMPLS: zw eager compile zero3 seed seed-noff ds ds-noff ds-zero3 fsdp fsdp-compile" \
         "fsdp-offload)" ;;
  esac
done
ACC=${ACC:-1}
if ! is_uint "$ACC" || ((ACC < 1)); then die "ACC=$ACC is not a positive number"; fi
NPROC=${NPROC:-1}
if ! is_uint "$NPROC" || ((NPROC < 1)); then die "NPROC=$NPROC is not a positive number"; fi
FSDP_BACKEND=${FSDP_BACKEND:-nccl}
ZWRUN=${ZWRUN:-$BUILD/tools/zwrun}
DS_GPT=$HERE/ds_gpt.py
FSDP_GPT=$HERE/fsdp_gpt.py
# GPUs the NPROC ranks use (MFU is per GPU): one per rank while there are enough
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then NGPU=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .); fi
((NGPU >= 1)) || NGPU=1
GPUS=$((NPROC < NGPU ? NPROC : NGPU))
multi() { [[ $1 == zero3 || $1 == seed || $1 == seed-noff || $1 == fsdp* ]]; }  # IMPL runs on NPROC ranks

now() { printf '%s\n' "${EPOCHREALTIME/,/.}"; }
elapsed() { echo $((SECONDS - START)); }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
params_of() {  # L C T -> parameter count of the model (wte V*C tied, wpe T*C, per block 12C^2+13C, final ln 2C)
  awk -v L="$1" -v C="$2" -v T="$3" -v V="$VOCAB" 'BEGIN {printf "%.0f", V*C + T*C + L*(12*C*C + 13*C) + 2*C}'
}
flops_per_token() {  # L C T -> 6 N + 12 L C T
  awk -v N="$(params_of "$1" "$2" "$3")" -v L="$1" -v C="$2" -v T="$3" 'BEGIN {printf "%.0f", 6*N + 12*L*C*T}'
}
mfu_of() {  # tokens/s flops/token [GPUs] -> percent of PEAK_TFLOPS per GPU
  awk -v r="$1" -v f="$2" -v p="$PEAK_TFLOPS" -v g="${3:-1}" 'BEGIN {printf "%.1f", 100 * r * f / (p * 1e12 * g)}'
}
estimate_s() {  # SHAPE IMPL -> a guess of one run's wall seconds on an H200 (cold compile cache)
  local big=0
  read -r L C _ T B <<<"$(shape_dims "$1")"
  big=$(awk -v L="$L" -v C="$C" 'BEGIN {print (L*C*C > 4e8) ? 1 : 0}')
  case $2 in
    zw | zero3 | seed-noff) ((big)) && echo $((30 + 10 * ACC)) || echo $((10 + 5 * ACC)) ;;
    seed) ((big)) && echo $((40 + 15 * ACC)) || echo $((15 + 5 * ACC)) ;;
    eager) ((big)) && echo 30 || echo 15 ;;
    compile) ((big)) && echo 120 || echo 75 ;;
    ds*) ((big)) && echo $((150 + 20 * ACC)) || echo $((90 + 5 * ACC)) ;;
    fsdp | fsdp-offload) ((big)) && echo $((40 + 10 * ACC)) || echo $((25 + 5 * ACC)) ;;
    fsdp-compile) ((big)) && echo 150 || echo 100 ;;
  esac
}

WORK=$(mktemp -d -p "${WORK_DIR:-${TMPDIR:-/tmp}}" zw-gpu-bench.XXXXXX) || die "cannot make a work directory"
trap 'rm -rf "$WORK"' EXIT
[ -n "$LOG_DIR" ] && { mkdir -p "$LOG_DIR" || die "cannot make LOG_DIR $LOG_DIR"; }
LOGS=${LOG_DIR:-$WORK}
if [ -z "${TORCHINDUCTOR_CACHE_DIR:-}" ] && [ -d "$BUILD" ]; then export TORCHINDUCTOR_CACHE_DIR=$BUILD/torchinductor-cache; fi

# ---- what this is run on
echo "# bench/train/gpu.sh: GPU training throughput, zw_train vs PyTorch eager and torch.compile"
echo "# date $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host ${HOSTNAME:-?}, zerowire $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L 2>&1 | sed 's/^/# /'
  nvidia-smi --query-gpu=driver_version,memory.total,memory.used,power.limit,clocks.max.sm --format=csv 2>&1 | sed 's/^/# /'
else
  echo "# nvidia-smi: not found"
fi
TORCH_INFO=$("$PYTHON" - 2>&1 <<'PY'
import sys
import torch
line = f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}), python {sys.version.split()[0]}"
try:
    import triton
    line += f", triton {triton.__version__}"
except Exception as e:  # noqa: BLE001
    line += f", no triton ({type(e).__name__})"
print(line + f"; cuda available: {torch.cuda.is_available()}")
PY
)
HAVE_TORCH=$?
echo "# $PYTHON: $(tail -n 1 <<<"$TORCH_INFO")"
((HAVE_TORCH == 0)) || echo "gpu.sh: warning: $PYTHON cannot import torch: the eager and compile runs will fail" >&2
if [[ " $IMPLS " == *" compile "* ]]; then
  # Triton builds a small C launcher with the host compiler and Python.h: without them torch.compile fails
  "$PYTHON" -c 'import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' ||
    echo "gpu.sh: warning: no Python.h for $PYTHON (apt-get install python3-dev): torch.compile will likely fail" >&2
  command -v "${CC:-gcc}" >/dev/null || command -v cc >/dev/null ||
    echo "gpu.sh: warning: no C compiler (gcc/cc): torch.compile will likely fail" >&2
  cache=${TORCHINDUCTOR_CACHE_DIR:-/tmp/torchinductor_$(id -un)}
  files=$(find "$cache" -type f 2>/dev/null | wc -l)
  echo "# inductor cache $cache: $( ((files > 0)) && echo "warm ($files files)" || echo cold)"
fi
if [[ " $IMPLS " == *" zw "* ]] && [ ! -x "$ZW_TRAIN" ]; then
  echo "gpu.sh: warning: $ZW_TRAIN is not built (ninja -C $BUILD zw_train): the zw runs will fail" >&2
fi
echo "# work directory $WORK ($(df -h --output=avail "$WORK" 2>/dev/null | tail -n 1 | tr -d ' ') free)"
if [[ " $IMPLS " =~ \ (zero3|seed|seed-noff)\  ]] && [ ! -x "$ZWRUN" ]; then
  echo "gpu.sh: warning: $ZWRUN is not built (ninja -C $BUILD zwrun): the ZeRO-3 runs will fail" >&2
fi
DS_ENV=()
if [[ " $IMPLS " =~ \ ds(-noff|-zero3)?\  ]]; then
  if "$PYTHON" -c 'import deepspeed' >/dev/null 2>&1; then
    echo "# deepspeed: $("$PYTHON" -c 'import deepspeed; print(deepspeed.__version__)' 2>/dev/null | tail -n 1) (installed)"
  elif [ -n "${DS_WHEELS:-}" ] && [ -d "$DS_WHEELS" ]; then
    # offline, once, into a fixed folder DS_SITE (DeepSpeed's JIT-built CPU Adam is cached by its source path: a
    # new folder per call of this script would rebuild it, about a minute); the sdist builds against the installed
    # torch (--no-build-isolation), and --no-deps keeps pip from replacing what the machine has
    t0=$SECONDS
    DS_SITE=${DS_SITE:-$BUILD/ds-site}
    if [ -d "$DS_SITE/deepspeed" ] || "$PYTHON" -m pip install --no-deps --no-index --no-build-isolation \
        --target "$DS_SITE" "$DS_WHEELS"/* >"$LOGS/ds-install.log" 2>&1; then
      DS_ENV=(env "PYTHONPATH=$DS_SITE${PYTHONPATH:+:$PYTHONPATH}")
      echo "# deepspeed: $("${DS_ENV[@]}" "$PYTHON" -c 'import deepspeed; print(deepspeed.__version__)' 2>&1 | tail -n 1)" \
        "installed from $DS_WHEELS in $((SECONDS - t0)) s"
    else
      echo "gpu.sh: warning: pip install from $DS_WHEELS failed (the ds runs will fail):" >&2
      tail -n 5 "$LOGS/ds-install.log" >&2
    fi
  else
    echo "gpu.sh: warning: $PYTHON cannot import deepspeed and DS_WHEELS is not a folder: the ds runs will fail" >&2
  fi
fi
# ds_json IMPL B -> the path of the DeepSpeed JSON of a ZeRO-3 impl with micro-batch B per rank, ACC accumulation
# steps and NPROC ranks (ds runs as one process: NPROC 1 there)
ds_json() {
  local f="$WORK/$1.b$2.json" prec='"fp16": {"enabled": true}' off=',"offload_optimizer": {"device": "cpu", "pin_memory": true}'
  case $1 in
    zero3) prec='"bf16": {"enabled": true}' off="" ;;
    seed-noff) off="" ;;
  esac
  printf '{"train_batch_size": %d, "gradient_accumulation_steps": %d, "gradient_clipping": 1.0, %s,\n' \
    $(($2 * ACC * ${3:-$NPROC})) "$ACC" "$prec" >"$f"
  printf ' "zero_optimization": {"stage": 3%s, "overlap_comm": true, "contiguous_gradients": true}}\n' "$off" >>"$f"
  echo "$f"
}

# ---- the shard
max_window=0
for s in $SHAPES; do
  read -r L C H T B <<<"$(shape_dims "$s")"
  ((B * ACC * NPROC * (T + 1) > max_window)) && max_window=$((B * ACC * NPROC * (T + 1)))
done
TOKENS=$((max_window * STEPS * 10 / 9 + 1))
((TOKENS < 1048576)) && TOKENS=1048576
SHARD=$WORK/tokens.bin
"$PYTHON" - "$SHARD" "$TOKENS" "$SEED" "$TOKEN_RANGE" <<'PY' || die "cannot write the token shard"
import array, random, struct, sys
path, n, seed, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
raw = array.array("H", random.Random(seed).randbytes(2 * n))
tokens = array.array("H", [(v * top) >> 16 for v in raw])  # 16 random bits scaled into [0, top)
if sys.byteorder == "big":
    tokens.byteswap()
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(tokens.tobytes())
PY
echo "# shard: $TOKENS random tokens below $TOKEN_RANGE (python random.Random($SEED)), $(($(stat -c %s "$SHARD") / 1024)) KiB"

est=0
for s in $SHAPES; do for i in $IMPLS; do est=$((est + REPS * $(estimate_s "$s" "$i"))); done; done
echo "# $REPS rep(s) x $STEPS steps (torch: first $WARMUP untimed; zw_train: median over all); MFU at $PEAK_TFLOPS TFLOP/s"
echo "# rough wall-time estimate with a cold compile cache: ${est} s; no run starts after ${DEADLINE_S} s"
((est > DEADLINE_S)) && echo "# (more than the deadline: split SHAPES over several calls, or the last runs are skipped)"

# ---- the runs
declare -A RUNS OK PEAK COMP WALL
STAT="" BAD=""
run_one() {  # SHAPE IMPL REP -> appends to RUNS/OK/PEAK/COMP/WALL
  local shape=$1 impl=$2 rep=$3 L C H T B
  read -r L C H T B <<<"$(shape_dims "$shape")"
  local key="$shape|$impl" log="$LOGS/$shape.$impl.$rep.log" out="$WORK/zw-out"
  local batch=$B  # zw_train's --batch is the global batch: with a JSON, B x ACC x NPROC (its train_batch_size)
  [[ $impl == zero3 || $impl == seed || $impl == seed-noff ]] && batch=$((B * ACC * NPROC))
  local common=(--layers "$L" --d-model "$C" --heads "$H" --seq-len "$T" --vocab "$VOCAB" --batch "$batch"
                --steps "$STEPS" --lr 6e-4 --min-lr 6e-5 --warmup-steps "$WARMUP" --weight-decay 0.1
                --grad-clip 1.0 --seed "$SEED" --data-bin "$SHARD")
  local -a cmd
  case $impl in
    zw) cmd=("$ZW_TRAIN" --device cuda --dtype bf16 "${common[@]}" --out-dir "$out" --log-every 10
             --eval-every 0 --eval-batches 1 --ckpt-every -1 --peak-tflops "$PEAK_TFLOPS") ;;
    eager | compile)
      cmd=("$PYTHON" "$TORCH_GPT" --device cuda --dtype bf16 --compile "$([ "$impl" = compile ] && echo 1 || echo 0)"
           "${common[@]}" --warmup-iters "$WARMUP" --log-every 10) ;;
    zero3 | seed | seed-noff)
      cmd=("$ZWRUN" -n "$NPROC" --timeout "$RUN_TIMEOUT_S" -- "$ZW_TRAIN" --device cuda "${common[@]}" --out-dir "$out"
           --log-every 10 --eval-every 0 --eval-batches 1 --ckpt-every -1 --peak-tflops "$PEAK_TFLOPS"
           --deepspeed_config "$(ds_json "$impl" "$B")") ;;
    ds | ds-noff | ds-zero3)  # the JSON of seed, seed-noff or zero3
      local json=seed
      [ "$impl" = ds ] || json=${impl#ds-}
      [ "$json" = noff ] && json=seed-noff
      cmd=("${DS_ENV[@]}" "$PYTHON" "$DS_GPT" "${common[@]}" --warmup-iters "$WARMUP" --log-every 10
           --deepspeed_config "$(ds_json "$json" "$B" 1)") ;;
    fsdp | fsdp-compile | fsdp-offload)
      cmd=("$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" "$FSDP_GPT" "${common[@]}"
           --acc "$ACC" --warmup-iters "$WARMUP" --log-every 10 --backend "$FSDP_BACKEND"
           --compile "$([ "$impl" = fsdp-compile ] && echo 1 || echo 0)"
           --offload "$([ "$impl" = fsdp-offload ] && echo 1 || echo 0)") ;;
  esac
  # shellcheck disable=SC2206  # word splitting of the extra flags is intended
  case $impl in zw | zero3 | seed | seed-noff) cmd+=($ZW_ARGS) ;; *) cmd+=($TORCH_ARGS) ;; esac
  local left=$((DEADLINE_S - $(elapsed)))
  local tag
  tag=$(printf '[%4ss] %-10s %-12s rep %d/%d' "$(elapsed)" "$shape" "$impl" "$rep" "$REPS")
  ((rep == 1)) && echo "  + ${cmd[*]}"
  if ((left < MIN_RUN_S)); then
    echo "$tag skipped: ${left} s left before DEADLINE_S=$DEADLINE_S"
    RUNS[$key]+=" skipped"
    BAD+=" $shape/$impl/$rep(skipped)"
    STAT=skipped
    csv_row "$shape" "$impl" "$rep" skipped "" "" "" "" ""
    return
  fi
  local limit=$((left < RUN_TIMEOUT_S ? left : RUN_TIMEOUT_S))
  rm -rf "$out"
  local t0 t1 rc
  t0=$(now)
  { echo "+ ${cmd[*]}"; echo "+ timeout ${limit} s"; } >"$log"
  timeout -k 10 "$limit" "${cmd[@]}" >>"$log" 2>&1
  rc=$?
  t1=$(now)
  rm -rf "$out"
  local wall tok mfu peak reserved comp
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
  if [[ $impl == zw || $impl == zero3 || $impl == seed || $impl == seed-noff ]]; then
    tok=$(sed -n 's/^\(\[0\] \)\{0,1\}zw_train: done.* median \([0-9.]*\) tokens\/s.*/\2/p' "$log" | tail -n 1)
    mfu=$(sed -n 's/^\(\[0\] \)\{0,1\}zw_train: done.* MFU \([0-9.]*\) %.*/\2/p' "$log" | tail -n 1)
    peak=$(sed -n 's/^\(\[0\] \)\{0,1\}zw_train: done.* peak device memory \([0-9.]*\) GiB.*/\2/p' "$log" | tail -n 1)
    reserved="" comp=""
  else
    tok=$(sed -n 's/^tokens_per_s=//p' "$log" | tail -n 1)
    mfu=$(sed -n 's/^mfu=//p' "$log" | tail -n 1)
    peak=$(sed -n 's/^peak_gib=//p' "$log" | tail -n 1)
    reserved=$(sed -n 's/^peak_reserved_gib=//p' "$log" | tail -n 1)
    comp=$(sed -n 's/^compile_s=//p' "$log" | tail -n 1)
  fi
  if ((rc == 0)) && [[ $tok =~ ^[0-9.]+$ ]]; then
    STAT=ok
    RUNS[$key]+=" $(printf '%.0f' "$tok")"
    OK[$key]+=" $tok"
    [ -n "$peak" ] && PEAK[$key]+=" $peak"
    [ -n "$comp" ] && COMP[$key]+=" $comp"
    WALL[$key]+=" $wall"
    printf '%s %10.0f tok/s  MFU %s %%  peak %s GiB%s%s  wall %s s\n' "$tag" "$tok" "${mfu:--}" "${peak:--}" \
      "${reserved:+ (reserved $reserved)}" "${comp:+  warm-up $comp s}" "$wall"
  else
    if ((rc == 124 || rc == 137)); then STAT=timeout; else STAT="failed"; fi
    RUNS[$key]+=" $STAT"
    BAD+=" $shape/$impl/$rep($STAT)"
    echo "$tag $STAT (exit $rc) after $wall s; the last lines of $log:"
    tail -n 15 "$log" | sed 's/^/    | /'
  fi
  csv_row "$shape" "$impl" "$rep" "$STAT" "$tok" "$mfu" "$peak" "$comp" "$wall"
}
csv_row() {
  [ -n "$RESULTS_CSV" ] || return 0
  [ -s "$RESULTS_CSV" ] || echo "date,shape,impl,rep,status,tokens_per_s,mfu_reported,peak_gib,warmup_s,wall_s" >"$RESULTS_CSV"
  echo "$(date -u +%FT%TZ),$(IFS=,; echo "$*")" >>"$RESULTS_CSV"
}

for s in $SHAPES; do
  read -r L C H T B <<<"$(shape_dims "$s")"
  echo "## $s: L$L d$C ${H}h T$T B$B V$VOCAB ($((B * T)) tokens/step), $(params_of "$L" "$C" "$T") parameters," \
    "$(awk -v f="$(flops_per_token "$L" "$C" "$T")" 'BEGIN {printf "%.3f", f / 1e9}') GFLOP/token" \
    "$([[ " $IMPLS " =~ \ (zero3|seed|seed-noff|ds|ds-noff|ds-zero3|fsdp|fsdp-compile|fsdp-offload)\  ]] &&
      echo "; ZeRO-3/FSDP2 impls: micro-batch $B x ACC $ACC x $NPROC rank(s) on $GPUS GPU(s) (ds: 1 rank)")"
  for ((r = 1; r <= REPS; ++r)); do
    for i in $IMPLS; do run_one "$s" "$i" "$r"; done
  done
done

# ---- the table
echo
echo "# summary: median of the runs' median tokens/s; MFU = median x (6N + 12LCT) / ($PEAK_TFLOPS TFLOP/s x GPUs); peak: the"
echo "# largest of the runs (torch: max_memory_allocated); warm-up: torch's untimed first $WARMUP steps (compile included)"
printf '%-12s %-12s %-30s %10s %-19s %6s %8s %9s %7s\n' shape impl "runs (tokens/s)" median "min-max" "MFU %" \
  "peak GiB" "warm-up s" "wall s"
declare -A MED
ratio() {  # SHAPE A B -> median(A) / median(B)
  if [ -n "${MED[$1|$2]:-}" ] && [ -n "${MED[$1|$3]:-}" ]; then
    awk -v a="${MED[$1|$2]}" -v b="${MED[$1|$3]}" 'BEGIN {printf "%.2f", a / b}'
  else
    echo n/a
  fi
}
for s in $SHAPES; do
  read -r L C H T B <<<"$(shape_dims "$s")"
  fpt=$(flops_per_token "$L" "$C" "$T")
  for i in $IMPLS; do
    key="$s|$i"
    # shellcheck disable=SC2086  # the lists are space-separated on purpose
    if [ -n "${OK[$key]:-}" ]; then
      med=$(median ${OK[$key]})
      MED[$key]=$med
      lo=$(printf '%s\n' ${OK[$key]} | sort -g | head -n 1)
      hi=$(printf '%s\n' ${OK[$key]} | sort -g | tail -n 1)
      pk=-; [ -n "${PEAK[$key]:-}" ] && pk=$(printf '%.1f' "$(printf '%s\n' ${PEAK[$key]} | sort -g | tail -n 1)")
      cp=-; [ -n "${COMP[$key]:-}" ] && cp=$(printf '%s\n' ${COMP[$key]} | sort -g | tail -n 1)
      wl=$(printf '%s\n' ${WALL[$key]} | sort -g | tail -n 1)
      g=1; multi "$i" && g=$GPUS
      printf '%-12s %-12s %-30s %10.0f %-19s %6s %8s %9s %7s\n' "$s" "$i" "${RUNS[$key]# }" "$med" \
        "$(printf '%.0f-%.0f' "$lo" "$hi")" "$(mfu_of "$med" "$fpt" "$g")" "$pk" "$cp" "$wl"
    else
      printf '%-12s %-12s %-30s %10s %-19s %6s %8s %9s %7s\n' "$s" "$i" "${RUNS[$key]# }" n/a - - - - -
    fi
  done
  line=""
  for pair in zw/eager zw/compile compile/eager zero3/zw seed/ds seed-noff/ds-noff zero3/ds-zero3 seed/seed-noff \
    seed-noff/zw zero3/fsdp zero3/fsdp-compile seed/fsdp-offload fsdp-compile/fsdp; do
    a=${pair%/*} b=${pair#*/}
    [[ " $IMPLS " == *" $a "* && " $IMPLS " == *" $b "* ]] && line+=" $pair $(ratio "$s" "$a" "$b"),"
  done
  echo "${s}:${line%,}"
done
echo "# total wall time $(elapsed) s"
[ -z "$BAD" ] && exit 0
echo "# not every run succeeded:$BAD"
# Exit 75 (EX_TEMPFAIL) when every missing run was only skipped for the deadline, 1 when one failed or timed out.
[[ " ${BAD//(skipped)/} " == *"("* ]] && exit 1
exit 75
