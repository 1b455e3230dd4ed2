#!/usr/bin/env bash
# tests/zero/engine/zwrun_train_test.sh — zw_train --deepspeed_config as real processes through zwrun.
#
# Usage: zwrun_train_test.sh ZWRUN ZW_TRAIN TEST_DIR. (1) The seed DeepSpeed config of issue 7 (batch 512,
# accumulation 4, fp16, offloaded optimizer) on 4 ranks over shm with a tiny model: 3 steps, metrics from rank 0,
# the step-1 loss within 2e-3 of the single-process trainer's with --batch 512 (same data and init; fp16 weights);
# --sample reads its sharded checkpoint.
# (2) fp32 on 2 ranks over tcp equals the single-process run within 1e-4 per step. (3) A config whose batch does not
# divide among the ranks fails with the config's own message. Non-goals: speed.
set -euo pipefail
ZWRUN=$1
ZW_TRAIN=$2
TEST_DIR=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "zwrun_train_test: FAIL: $*" >&2; exit 1; }
TINY=(--layers 1 --d-model 32 --heads 2 --seq-len 8 --lr 3e-3 --warmup-steps 1 --eval-every 0 --eval-batches 1)
losses() { python3 -c 'import json,sys
print(" ".join(str(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "loss" in json.loads(l)))' "$1"; }
close() { python3 -c 'import sys
a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; tol=float(sys.argv[3])
n=int(sys.argv[4]); a=a[:n]; b=b[:n]
assert len(a)==len(b)==n, (a,b)
bad=[(i+1,x,y) for i,(x,y) in enumerate(zip(a,b)) if abs(x-y)>tol*y]
sys.exit("steps differ: %s" % bad if bad else 0)' "$1" "$2" "$3" "$4"; }

# (1) seed config, 4 ranks, shm.
"$ZWRUN" -n 4 --transport shm --timeout 200 -- "$ZW_TRAIN" "${TINY[@]}" --steps 3 --out-dir "$WORK/seed" \
    --deepspeed_config "$TEST_DIR/seed_ds_config.json" >"$WORK/seed.log" 2>&1 \
    || { cat "$WORK/seed.log"; fail "seed run"; }
grep -q "ZeRO-3 on 4 ranks (shm)" "$WORK/seed.log" || fail "no ZeRO-3 banner: $(cat "$WORK/seed.log")"
grep -q "fp16 + dynamic loss scale" "$WORK/seed.log" || fail "fp16 not reported"
[ "$(grep -c '"loss"' "$WORK/seed/metrics.jsonl")" -eq 3 ] || fail "expected 3 step lines in metrics.jsonl"
"$ZW_TRAIN" "${TINY[@]}" --batch 512 --steps 1 --quiet --out-dir "$WORK/seed_ref"
close "$(losses "$WORK/seed/metrics.jsonl")" "$(losses "$WORK/seed_ref/metrics.jsonl")" 2e-3 1 || fail "seed step 1"

# The sharded checkpoint of that run samples text (consolidated on the fly).
"$ZW_TRAIN" --sample --ckpt "$WORK/seed/ckpt_zero" --prompt "ab" --tokens 40 --temperature 0 >"$WORK/sample.txt" \
    || fail "sampling from the ZeRO checkpoint"
[ "$(head -c -1 "$WORK/sample.txt" | wc -c)" -eq 42 ] \
    || fail "expected prompt + 40 bytes, got $(wc -c <"$WORK/sample.txt")"

# (2) fp32, 2 ranks, tcp, accumulation 2: the single-process curve.
echo '{"train_batch_size":8,"gradient_accumulation_steps":2,"zero_optimization":{"stage":3,
  "stage3_param_persistence_threshold":0}}' >"$WORK/fp32.json"
"$ZWRUN" -n 2 --transport tcp --timeout 200 -- "$ZW_TRAIN" "${TINY[@]}" --steps 5 --quiet --out-dir "$WORK/fp32" \
    --deepspeed_config "$WORK/fp32.json" || fail "fp32 tcp run"
"$ZW_TRAIN" "${TINY[@]}" --batch 8 --steps 5 --quiet --out-dir "$WORK/fp32_ref"
close "$(losses "$WORK/fp32/metrics.jsonl")" "$(losses "$WORK/fp32_ref/metrics.jsonl")" 1e-4 5 || fail "fp32 curve"

# model.json and latest are replaced atomically on every save (they used to be rewritten in place: a crash mid-save
# could leave a torn model.json): a hard link to the old files keeps the old contents, the names get new inodes.
ln "$WORK/fp32/ckpt_zero/model.json" "$WORK/model.json.before"
ln "$WORK/fp32/ckpt_zero/latest" "$WORK/latest.before"
"$ZWRUN" -n 2 --transport tcp --timeout 200 -- "$ZW_TRAIN" "${TINY[@]}" --steps 6 --quiet --out-dir "$WORK/fp32" \
    --deepspeed_config "$WORK/fp32.json" --resume || fail "fp32 resume"
[ "$(stat -c %i "$WORK/fp32/ckpt_zero/model.json")" != "$(stat -c %i "$WORK/model.json.before")" ] \
    || fail "model.json was rewritten in place, not replaced"
[ "$(stat -c %i "$WORK/fp32/ckpt_zero/latest")" != "$(stat -c %i "$WORK/latest.before")" ] \
    || fail "latest was rewritten in place, not replaced"
[ "$(cat "$WORK/fp32/ckpt_zero/latest")" = global_step6 ] || fail "latest names $(cat "$WORK/fp32/ckpt_zero/latest")"

# (3) a batch that 3 ranks cannot share is refused by the config parser, naming the world size source.
echo '{"train_batch_size":8,"zero_optimization":{"stage":3}}' >"$WORK/bad.json"
if "$ZWRUN" -n 3 --timeout 100 -- "$ZW_TRAIN" "${TINY[@]}" --steps 1 --quiet --out-dir "$WORK/bad" \
    --deepspeed_config "$WORK/bad.json" 2>"$WORK/bad.err"; then fail "a batch of 8 on 3 ranks was accepted"; fi
grep -q "ZW_WORLD_SIZE=3" "$WORK/bad.err" || fail "unclear batch error: $(cat "$WORK/bad.err")"
echo "zwrun_train_test: ok"
