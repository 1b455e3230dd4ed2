#!/usr/bin/env bash
# tests/zero/config/corpus_train_test.sh — every corpus config that corpus/expected.json says trains does train:
# zw_train --deepspeed_config FILE on 2 ranks through zwrun, a tiny model, 2 steps, unchanged.
#
# Usage: corpus_train_test.sh ZWRUN ZW_TRAIN CORPUS_DIR [ZW_TRAIN ARGS...]. Checks per file: the run succeeds,
# metrics.jsonl has 2 steps, and where the file asks for gather_16bit_weights_on_model_save the consolidated
# model.safetensors is written beside the sharded checkpoint (in the training dtype). Then one refused file through
# the command line: the error lists every problem. Extra arguments go to every zw_train (e.g. --device cuda): then
# every file is tried, the ones that fail are listed at the end, and the dtype checks are left out.
# Non-goals: numerics (zw_zero_engine_test, zw_zero_zwrun_test) and the refusal lists (zw_zero_corpus_test).
set -euo pipefail
ZWRUN=$1
ZW_TRAIN=$2
CORPUS=$3
shift 3
EXTRA=("$@")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "corpus_train_test: FAIL: $*" >&2; exit 1; }
TINY=(--layers 1 --d-model 32 --heads 2 --seq-len 8 --batch 8 --steps 2 --eval-every 0 --eval-batches 1)
trains=$(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))
print(" ".join(sorted(k for k,v in e.items() if "trains" in v)))' "$CORPUS/expected.json")
n=0
failed=""
for name in $trains; do
  out="$WORK/${name%.json}"
  if ! "$ZWRUN" -n 2 --transport shm --timeout 120 -- "$ZW_TRAIN" "${TINY[@]}" "${EXTRA[@]}" --out-dir "$out" \
      --deepspeed_config "$CORPUS/$name" >"$out.log" 2>&1; then
    [ ${#EXTRA[@]} -gt 0 ] || { cat "$out.log"; fail "$name did not train"; }
    failed="$failed $name"; echo "--- $name:"; tail -5 "$out.log"; continue
  fi
  [ "$(grep -c '"loss"' "$out/metrics.jsonl")" -eq 2 ] || fail "$name: expected 2 steps in metrics.jsonl"
  if grep -q 'gather_16bit_weights_on_model_save": *\(true\|"auto"\)' "$CORPUS/$name"; then
    [ -s "$out/ckpt_zero/global_step2/model.safetensors" ] || fail "$name: no consolidated model.safetensors"
  fi
  n=$((n + 1))
done
if [ ${#EXTRA[@]} -gt 0 ]; then
  echo "corpus_train_test: with ${EXTRA[*]}: $n trained; failed:${failed:- none}"
  [ -z "$failed" ] || exit 1
  exit 0
fi
[ "$n" -ge 12 ] || fail "only $n configs train"
# The 16-bit model is in the training dtype: bf16 for a bf16 file, f32 for a Hugging Face file run in fp32 here.
st_dtype() { python3 -c 'import json,struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]
h=json.loads(f.read(n)); print(sorted({v["dtype"] for k,v in h.items() if k!="__metadata__"}))' "$1"; }
[ "$(st_dtype "$WORK/axolotl_zero3_bf16/ckpt_zero/global_step2/model.safetensors")" = "['BF16']" ] \
    || fail "axolotl_zero3_bf16: model.safetensors is not BF16"
[ "$(st_dtype "$WORK/hf_zero3_offload_auto/ckpt_zero/global_step2/model.safetensors")" = "['F32']" ] \
    || fail "hf_zero3_offload_auto: model.safetensors is not F32"
# The summary of a Hugging Face-style file says what each "auto" became.
grep -q 'optimizer.params.lr = "auto" -> 0.001 (--lr)' "$WORK/hf_zero3_offload_auto.log" \
    || fail "no auto line in the summary: $(cat "$WORK/hf_zero3_offload_auto.log")"
# A refused file fails at once with every problem in one message.
if "$ZWRUN" -n 2 --timeout 60 -- "$ZW_TRAIN" "${TINY[@]}" --out-dir "$WORK/typos" \
    --deepspeed_config "$CORPUS/user_first_try_typos.json" 2>"$WORK/typos.err"; then
  fail "user_first_try_typos.json trained"
fi
grep -q "problems in the DeepSpeed config, in file order" "$WORK/typos.err" || fail "$(cat "$WORK/typos.err")"
echo "corpus_train_test: ok ($n configs trained)"
