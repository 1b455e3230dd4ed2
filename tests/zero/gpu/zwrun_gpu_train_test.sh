#!/usr/bin/env bash
# tests/zero/gpu/zwrun_gpu_train_test.sh — zw_train --deepspeed_config --device cuda as real processes under zwrun,
# the ranks sharing the visible GPU(s) (the ZeRO-3 engine's device path, zero/engine/engine.h).
#
# Usage: zwrun_gpu_train_test.sh ZWRUN ZW_TRAIN TEST_DIR [PARTS]. Exits 77 without a GPU. PARTS (or ZW_ZERO_GPU_PARTS;
# default all):
# a comma list of parity,seed,demo,resume,timeline,kill.
#  parity   bf16 and fp16, optimizer on the GPU, gradients reduced in fp32 (communication_data_type), 1-4 ranks:
#           the first 6 steps' losses within 1e-2 (relative) of the single-process GPU trainer (zw_train --device
#           cuda, FlatStrategy) with the same global batch, step 1 within 2e-3. Also offload_optimizer cpu +
#           pin_memory (2 ranks) and offload_param cpu (2 ranks) within the same bounds.
#  seed     the seed's DeepSpeed config as written (tests/zero/engine/seed_ds_config.json: stage 3, fp16 dynamic loss
#           scale, offload_optimizer cpu + pin_memory, overlap_comm, contiguous_gradients, batch 512 in 4 micro
#           steps) on 2 ranks: 3 steps, step 1 within 2e-3 of the single-process fp16 GPU trainer with --batch 512.
#  demo     tools/zw_train/ds_zero3_demo.json on 2 ranks with the default model: 3 steps.
#  resume   2 ranks stop after 3 of 6 steps (GPU optimizer: state copied down to save); the checkpoint resumes on 3
#           GPU ranks and on 2 CPU ranks; steps 4-6 within 1e-2 (GPU) and 3e-2 (CPU, f32 compute) of the
#           uninterrupted 2-rank run.
#  timeline --timeline on 2 ranks: the overlap line is printed and both rank files have device-timed spans.
#  kill     2 ranks started by hand (no zwrun, which would stop the survivor itself); rank 1 is SIGKILLed once
#           training runs; rank 0 must exit non-zero within 120 s with an error naming rank 1. With
#           ZW_ZERO_TEST_DEVICE=cpu this part runs on the host engine without a GPU (zw_zero_kill_test).
set -euo pipefail
ZWRUN=$1
ZW_TRAIN=$2
TEST_DIR=$3
PARTS=${4:-${ZW_ZERO_GPU_PARTS:-parity,seed,demo,resume,timeline,kill}}
ROOT=$(cd "$TEST_DIR/../../.." && pwd)
DEVICE=${ZW_ZERO_TEST_DEVICE:-cuda}
if [ "$DEVICE" = cpu ] && [ "$PARTS" != kill ]; then echo "ZW_ZERO_TEST_DEVICE=cpu runs only the kill part" >&2; exit 2; fi
if [ "$DEVICE" = cuda ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "zwrun_gpu_train_test: skip: no CUDA device"
  exit 77
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "zwrun_gpu_train_test: FAIL: $*" >&2; exit 1; }
want() { [[ ",$PARTS," == *",$1,"* ]]; }
TINY=(--layers 2 --d-model 64 --heads 2 --seq-len 32 --lr 1e-3 --warmup-steps 2 --eval-every 0 --eval-batches 1)
losses() { python3 -c 'import json,sys
print(" ".join(str(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "loss" in json.loads(l)))' "$1"; }
# close A B TOL N [TOL1]: the first N values of A within TOL·|b| of B's (the first within TOL1 when given).
close() { python3 -c 'import sys
a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; tol=float(sys.argv[3])
n=int(sys.argv[4]); t1=float(sys.argv[5]) if len(sys.argv) > 5 else tol; a=a[:n]; b=b[:n]
assert len(a)==len(b)==n, (a,b)
bad=[(i+1,x,y) for i,(x,y) in enumerate(zip(a,b)) if abs(x-y)>(t1 if i==0 else tol)*abs(y)]
print("  max relative difference %.2e" % max(abs(x-y)/abs(y) for x,y in zip(a,b)))
sys.exit("steps differ: %s" % bad if bad else 0)' "$@"; }
zero() {  # zero N OUT JSON [args...]: zw_train under zwrun on N ranks on the GPU
  local n=$1 out=$2 json=$3
  shift 3
  "$ZWRUN" -n "$n" --timeout 300 -- "$ZW_TRAIN" "${TINY[@]}" --quiet --out-dir "$WORK/$out" \
      --deepspeed_config "$json" "$@" >"$WORK/$out.log" 2>&1 || { cat "$WORK/$out.log"; fail "$out"; }
}
ds() {  # ds NAME PRECISION EXTRA_ZERO_KEYS: a batch-12 config
  echo "{\"train_batch_size\":12,\"communication_data_type\":\"fp32\",\"$2\":{\"enabled\":true},
  \"zero_optimization\":{\"stage\":3,\"stage3_param_persistence_threshold\":1000$3}}" >"$WORK/$1.json"
}
ds bf16 bf16 ""
ds fp16 fp16 ""
ds bf16_offload bf16 ',"offload_optimizer":{"device":"cpu","pin_memory":true}'
ds bf16_offload_param bf16 ',"offload_optimizer":{"device":"cpu","pin_memory":true},"offload_param":{"device":"cpu"}'

if want parity || want resume; then
  for p in bf16 fp16; do
    "$ZW_TRAIN" "${TINY[@]}" --device cuda --dtype $p --batch 12 --steps 6 --quiet --out-dir "$WORK/flat_$p" \
        || fail "single-process $p reference"
  done
fi
if want parity; then
  for p in bf16 fp16; do
    for n in 1 2 3 4; do
      zero $n "${p}_n$n" "$WORK/$p.json" --device cuda --steps 6
      echo "parity: $p on $n ranks"
      close "$(losses "$WORK/${p}_n$n/metrics.jsonl")" "$(losses "$WORK/flat_$p/metrics.jsonl")" 1e-2 6 2e-3 \
          || fail "$p on $n ranks against the single-process GPU trainer"
    done
  done
  for c in bf16_offload bf16_offload_param; do
    zero 2 "$c" "$WORK/$c.json" --device cuda --steps 6
    grep -q "offloaded to the CPU" "$WORK/$c.log" || true
    echo "parity: $c on 2 ranks"
    close "$(losses "$WORK/$c/metrics.jsonl")" "$(losses "$WORK/flat_bf16/metrics.jsonl")" 1e-2 6 2e-3 \
        || fail "$c against the single-process GPU trainer"
  done
fi

if want seed; then
  "$ZWRUN" -n 2 --timeout 300 -- "$ZW_TRAIN" "${TINY[@]}" --device cuda --steps 3 --out-dir "$WORK/seed" \
      --deepspeed_config "$TEST_DIR/../engine/seed_ds_config.json" >"$WORK/seed.log" 2>&1 \
      || { cat "$WORK/seed.log"; fail "seed config on the GPU"; }
  grep -q "ZeRO-3 on 2 ranks (.*) on the GPU, fp16 + dynamic loss scale" "$WORK/seed.log" \
      || fail "no GPU ZeRO-3 banner: $(cat "$WORK/seed.log")"
  grep -q "optimizer offloaded to the CPU" "$WORK/seed.log" || fail "the offloaded optimizer is not reported"
  "$ZW_TRAIN" "${TINY[@]}" --device cuda --dtype fp16 --batch 512 --steps 1 --quiet --out-dir "$WORK/seed_ref" \
      || fail "single-process fp16 batch 512"
  echo "seed: step 1 against the single-process trainer"
  close "$(losses "$WORK/seed/metrics.jsonl")" "$(losses "$WORK/seed_ref/metrics.jsonl")" 2e-3 1 || fail "seed step 1"
fi

if want demo; then
  "$ZWRUN" -n 2 --timeout 300 -- "$ZW_TRAIN" --deepspeed_config "$ROOT/tools/zw_train/ds_zero3_demo.json" \
      --device cuda --steps 3 --eval-every 0 --eval-batches 1 --out-dir "$WORK/demo" >"$WORK/demo.log" 2>&1 \
      || { cat "$WORK/demo.log"; fail "the demo config on the GPU"; }
  [ "$(grep -c '"loss"' "$WORK/demo/metrics.jsonl")" -eq 3 ] || fail "demo: expected 3 step lines"
fi

if want resume; then
  [ -f "$WORK/bf16_n2/metrics.jsonl" ] || zero 2 bf16_n2 "$WORK/bf16.json" --device cuda --steps 6
  zero 2 part "$WORK/bf16.json" --device cuda --steps 6 --stop-after 3
  cp -r "$WORK/part" "$WORK/part_cpu"
  zero 3 part "$WORK/bf16.json" --device cuda --steps 6 --resume
  full=$(losses "$WORK/bf16_n2/metrics.jsonl" | cut -d' ' -f4-6)
  echo "resume: 2 GPU ranks -> 3 GPU ranks, steps 4-6"
  # metrics.jsonl of a resumed run holds both runs' steps (1-3, then 4-6): compare its last three.
  close "$(losses "$WORK/part/metrics.jsonl" | awk '{print $(NF-2), $(NF-1), $NF}')" "$full" 1e-2 3 \
      || fail "resume on 3 GPU ranks"
  zero 2 part_cpu "$WORK/bf16.json" --device cpu --steps 6 --resume
  echo "resume: 2 GPU ranks -> 2 CPU ranks, steps 4-6"
  close "$(losses "$WORK/part_cpu/metrics.jsonl" | awk '{print $(NF-2), $(NF-1), $NF}')" "$full" 3e-2 3 \
      || fail "resume on the CPU"
fi

if want timeline; then
  "$ZWRUN" -n 2 --timeout 300 -- "$ZW_TRAIN" "${TINY[@]}" --device cuda --steps 4 --out-dir "$WORK/tl" \
      --deepspeed_config "$WORK/bf16.json" --timeline "$WORK/tl/trace" >"$WORK/tl.log" 2>&1 \
      || { cat "$WORK/tl.log"; fail "timeline run"; }
  grep "hidden behind compute" "$WORK/tl.log" || fail "no overlap line: $(cat "$WORK/tl.log")"
  for r in 0 1; do
    python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); ev=[e for e in d["traceEvents"] if e.get("ph")=="X" and e.get("cat") in ("all-gather","reduce-scatter")]
assert ev and all(e["args"]["run_source"]=="device" for e in ev), "collective spans are not device-timed"' \
        "$WORK/tl/trace.rank$r.json" || fail "rank $r timeline"
  done
fi

if want kill; then
  steps_logged() { local n; n=$(grep -c '"loss"' "$WORK/kill/metrics.jsonl" 2>/dev/null) || true; echo "${n:-0}"; }
  port=$((20000 + RANDOM % 20000))
  pids=()
  for r in 0 1; do
    env ZW_STORE_ADDR=127.0.0.1:$port ZW_AUTH_TOKEN=zero3-kill-test ZW_RANK=$r ZW_WORLD_SIZE=2 ZW_LOCAL_RANK=$r \
        ZW_LOCAL_WORLD_SIZE=2 ZW_TIMEOUT=60 "$ZW_TRAIN" "${TINY[@]}" --device "$DEVICE" --steps 100000 \
        --out-dir "$WORK/kill" --deepspeed_config "$WORK/bf16.json" >"$WORK/kill$r.log" 2>&1 &
    pids[r]=$!
  done
  for _ in $(seq 1 120); do
    [ "$(steps_logged)" -ge 3 ] && break
    sleep 0.5
  done
  [ "$(steps_logged)" -ge 3 ] \
      || { kill -9 "${pids[0]}" "${pids[1]}" 2>/dev/null; cat "$WORK/kill0.log"; fail "kill: training did not start"; }
  kill -9 "${pids[1]}"
  rc=0
  for _ in $(seq 1 240); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "${pids[0]}" 2>/dev/null; then kill -9 "${pids[0]}"; fail "kill: rank 0 still runs 120 s after rank 1 died"; fi
  wait "${pids[0]}" || rc=$?
  [ "$rc" -ne 0 ] || fail "kill: rank 0 exited 0 after rank 1 died"
  grep -qi "rank 1" "$WORK/kill0.log" || fail "kill: rank 0's error does not name rank 1: $(tail -5 "$WORK/kill0.log")"
  echo "kill: rank 0 failed with: $(grep -i 'rank 1' "$WORK/kill0.log" | head -1)"
fi
echo "zwrun_gpu_train_test: ok"
