#!/usr/bin/env bash
# The long fuzz campaign of docs/RELIABILITY.md on a machine with 16 free cores (the GPU host), from a bundle made
# here by tests/fuzz/make_device_bundle.sh: build-fuzz/device/{bin,lib,corpora.tgz,run.sh} (run.sh is this file).
# Run from the repository root there (carry build-fuzz/device); it uses the tree's tests/fuzz/long_run.sh.
#   bash build-fuzz/device/run.sh [1|2|all]      GROUP 1, GROUP 2 (the two-run split: every target should reach
#                                                10,000,000 executions in its run), or every target in one run (the
#                                                estimated 14,700 core-seconds do not fit one: there only the fast
#                                                targets reach 10 M)
#   bash build-fuzz/device/run.sh collect GROUP  after a run started in the background: wait for it, copy its results
# Each run lasts FUZZ_SECONDS (540) plus about 20 s, niced (NICE, 19), so it may run beside a GPU stage. Workers per
# target are allotted from per-worker rates measured on that host (unique id 122k/s, checkpoint index 6.5k/s,
# safetensors 5.7k/s) and, for the others, rates measured on the dev VM times 5 (the ratio of those three: 3.5-5.6;
# estimated per worker there: ds_config 4.5k/s, store 4.5k, shm 5.5k, verbs 6.5k, tcp 12k, rendezvous 4.5k, peer
# record 40k, mailbox and liveness 300k+; 10 M take 6,000-8,000 core-seconds per group of 8,640); a
# target with W workers runs W libFuzzer jobs sharing one corpus, each for 10 M / W executions, and the fast targets
# finish early and leave their cores to the others. Every target starts from the corpus of the last campaign
# (corpora.tgz) plus the committed seeds and crash regressions.
# Results (in $OUT when set, else printed): summary.txt (one line per target: execs, workers, secs, cov, ft, corpus,
# crashes, then the host), logs.tgz (every worker's log and every crash artifact), corpora.tgz (the grown corpora).
set -uo pipefail
dev=$(cd "$(dirname "$0")" && pwd)
work=${FUZZ_WORK:-/tmp/zwfuzz}

case "${1:-all}" in
  1) targets="fuzz_ds_config fuzz_checkpoint_index fuzz_safetensors fuzz_verbs_wire fuzz_unique_id fuzz_peer_record
              fuzz_cuda_ipc_mailbox fuzz_verbs_liveness"
     workers="fuzz_ds_config=5 fuzz_checkpoint_index=4 fuzz_safetensors=4 fuzz_verbs_wire=3" ;;
  2) targets="fuzz_store_frame fuzz_rendezvous fuzz_shm_wire fuzz_tcp_wire"
     workers="fuzz_store_frame=5 fuzz_rendezvous=5 fuzz_shm_wire=4 fuzz_tcp_wire=2" ;;
  all) targets="fuzz_ds_config fuzz_checkpoint_index fuzz_safetensors fuzz_verbs_wire fuzz_unique_id fuzz_peer_record
                fuzz_cuda_ipc_mailbox fuzz_verbs_liveness fuzz_store_frame fuzz_rendezvous fuzz_shm_wire fuzz_tcp_wire"
       workers="fuzz_ds_config=2 fuzz_checkpoint_index=2 fuzz_safetensors=2 fuzz_verbs_wire=2 fuzz_store_frame=2
                fuzz_rendezvous=2 fuzz_shm_wire=2 fuzz_tcp_wire=1" ;;
  collect)
    group=${2:?collect needs the group}
    for _ in $(seq 600); do [ -f "$work/$group/out/done" ] && break; sleep 1; done
    [ -f "$work/$group/out/done" ] || { echo "group $group has not finished"; exit 1; }
    cat "$work/$group/out/summary.txt"
    [ -n "${OUT:-}" ] && cp "$work/$group/out"/{summary.txt,logs.tgz,corpora.tgz} "$OUT/"
    exit 0 ;;
  *) echo "usage: run.sh [1|2|all] | run.sh collect GROUP" >&2; exit 2 ;;
esac
group=${1:-all}
long=$work/$group/long out=$work/$group/out
rm -rf "$work/$group" && mkdir -p "$long" "$out"
tar xzf "$dev/corpora.tgz" -C "$long"  # <target>/corpus of the last campaign
export LD_LIBRARY_PATH=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ulimit -c 0
start=$(date -u +%FT%TZ)
# shellcheck disable=SC2086
RUNS=10000000 JOBS=12 NICE=${NICE:-19} MAX_TIME=${FUZZ_SECONDS:-540} WORKERS="$workers" FUZZ_BIN=$dev/bin \
  FUZZ_OUT=$long tests/fuzz/long_run.sh $targets > "$out/summary.txt" 2>&1
{
  echo "group $group, $start to $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
       "$(. /etc/os-release && echo "$PRETTY_NAME"), at $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
} >> "$out/summary.txt"
(cd "$long" && tar czf "$out/logs.tgz" --exclude='*/corpus' --exclude='*/corpus/*' .)
(cd "$long" && tar czf "$out/corpora.tgz" */corpus)
touch "$out/done"
cat "$out/summary.txt"
[ -n "${OUT:-}" ] && cp "$out"/{summary.txt,logs.tgz,corpora.tgz} "$OUT/"
exit 0
