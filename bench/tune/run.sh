#!/usr/bin/env bash
# bench/tune/run.sh — the tuning table of the host collectives: sweeps one knob at a time around the defaults
# (ZW_CHUNK_BYTES, ZW_SLOTS, ZW_TREE_THRESHOLD, ZW_EAGER_BYTES on shm and tcp; ZW_TCP_CONNS_PER_PEER and
# ZW_TCP_SPIN_US on tcp) with zw_all_gather_perf and zw_reduce_scatter_perf, every value of a knob run in turn
# within each repetition (A B C A B C ...), and prints per knob, transport, op and size the median out-of-place
# busbw of every value, the best value and the default's busbw as a fraction of the best. A default is worth changing only where another value
# wins by more than the spread between repetitions, at most sizes, on both transports.
#
#   bench/tune/run.sh [--build DIR] [--ranks N] [--reps R] [--sizes MIN:MAX:F] [--iters N] [--transports "shm tcp"]
#                     [--knobs "ZW_CHUNK_BYTES ..."] [--values "64K 1M"] [--out FILE]
# Defaults: build, 2 ranks, 3 repetitions, 4K:64M:4, 10 iterations (3 warm-up), shm and tcp, every knob above, each
# knob's own list of values (--values replaces it for every knob swept).
# --out appends the markdown table to FILE (e.g. docs/PERF.md). Raw logs go to BUILD/tune-results/DATE-TIME.
# Non-goals: tuning several knobs jointly (one at a time, the others at their defaults), GPU knobs (tools/gpu-check.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=build RANKS=2 REPS=3 SIZES=4K:64M:4 ITERS=10 TRANSPORTS="shm tcp" OUT="" VALUES=""
KNOBS="ZW_CHUNK_BYTES ZW_SLOTS ZW_TREE_THRESHOLD ZW_EAGER_BYTES ZW_TCP_CONNS_PER_PEER ZW_TCP_SPIN_US"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift ;;
    --ranks) RANKS=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --sizes) SIZES=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --transports) TRANSPORTS=$2; shift ;;
    --knobs) KNOBS=$2; shift ;;
    --values) VALUES=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

values_of() {  # the values swept for a knob; the first matching the default in src/common/knobs.cc is marked there
  if [ -n "$VALUES" ]; then echo "$VALUES"; return; fi
  case "$1" in
    ZW_CHUNK_BYTES) echo "256K 512K 1M 2M 4M" ;;
    ZW_SLOTS) echo "2 4 8" ;;
    ZW_TREE_THRESHOLD) echo "16K 64K 256K 1M 4M" ;;
    ZW_EAGER_BYTES) echo "4K 16K 64K" ;;
    ZW_TCP_CONNS_PER_PEER) echo "1 2 4" ;;
    ZW_TCP_SPIN_US) echo "0 20 100 200 500" ;;
    *) echo "run.sh: no sweep defined for $1" >&2; exit 2 ;;
  esac
}

zwrun=$BUILD/tools/zwrun
for b in "$zwrun" "$BUILD/bench/zw_all_gather_perf" "$BUILD/bench/zw_reduce_scatter_perf" "$BUILD/tools/zw_info"; do
  [ -x "$b" ] || { echo "run.sh: $b is missing: build first (cmake --build $BUILD)" >&2; exit 1; }
done
IFS=: read -r MIN MAX FACTOR <<<"$SIZES"
LOG=$BUILD/tune-results/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$LOG"
"$BUILD/tools/zw_info" --params >"$LOG/params.txt" 2>&1 || true
echo "# tune: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $RANKS ranks, $REPS reps, sizes $SIZES, logs $LOG"

for knob in $KNOBS; do
  for transport in $TRANSPORTS; do
    case "$knob" in ZW_TCP_*) [ "$transport" != tcp ] && continue ;; esac
    for rep in $(seq 1 "$REPS"); do
      for value in $(values_of "$knob"); do
        for op in all_gather reduce_scatter; do
          f="$LOG/${knob}_${transport}_${op}_${value}_r${rep}.txt"
          env "$knob=$value" timeout 600 "$zwrun" -n "$RANKS" --transport "$transport" -- "$BUILD/bench/zw_${op}_perf" \
            -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w 3 -c 0 -d float -o sum >"$f" 2>&1 ||
            echo "run.sh: $knob=$value $transport $op failed (see $f)" >&2
        done
      done
    done
    echo "# done: $knob on $transport ($(date -u +%T))"
  done
done

python3 - "$LOG" "$KNOBS" "$RANKS" <<'PY' | tee "$LOG/table.md"
import glob, os, re, statistics, sys
log, knobs, ranks = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
defaults = {}
for line in open(os.path.join(log, "params.txt"), errors="replace"):
    m = re.match(r"\s+(ZW_[A-Z_]+)\s+(\S+)\s+(int|bytes)\s+(\S+)", line)  # name, value, type, default
    if m: defaults[m.group(1)] = m.group(4)
runs = {}  # (knob, transport, op, value, size) -> [busbw]
for path in glob.glob(os.path.join(log, "*_r*.txt")):
    m = re.match(r"(ZW_[A-Z_]+?)_(shm|tcp)_(all_gather|reduce_scatter)_(\w+)_r\d+\.txt", os.path.basename(path))
    if not m: continue
    for line in open(path, errors="replace"):
        f = re.sub(r"^\[\d+\]\s*", "", line).split()
        if len(f) >= 13 and f[0].isdigit():
            runs.setdefault(m.groups() + (int(f[0]),), []).append(float(f[7]))
name = lambda s: f"{s >> 20}M" if s >= 1 << 20 else f"{s >> 10}K"
print("| knob | transport | op | size | busbw GB/s per value (median, min-max) | best | default/best |")
print("|---|---|---|---:|---|---|---:|")
for knob in knobs:
    keys = sorted({k[1:3] + (k[4],) for k in runs if k[0] == knob})
    for transport, op, size in keys:
        vals = sorted({k[3] for k in runs if k[0] == knob and k[1:3] == (transport, op)},
                      key=lambda v: float(re.sub(r"[KMG]$", "", v)) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(v[-1], 1))
        med = {v: statistics.median(runs[(knob, transport, op, v, size)]) for v in vals if (knob, transport, op, v, size) in runs}
        if not med: continue
        best = max(med, key=med.get)
        g = lambda x: f"{x:.3g}"
        cells = ", ".join(f"{v}: {g(med[v])} ({g(min(runs[(knob, transport, op, v, size)]))}-{g(max(runs[(knob, transport, op, v, size)]))})"
                          for v in med)
        d = defaults.get(knob)
        if knob == "ZW_EAGER_BYTES" and d == "auto":  # resolved by transport (src/collectives/comm_impl.cc)
            d = "64K" if transport == "tcp" else "16K"
        if knob == "ZW_TREE_THRESHOLD" and d == "auto":  # by transport and world size (src/collectives/comm_settings.cc)
            d = "1M" if transport == "tcp" and ranks & (ranks - 1) == 0 else "64K"
        ratio = f"{med[d] / med[best]:.2f}" if d in med and med[best] > 0 else "—"
        print(f"| {knob} | {transport} | {op} | {name(size)} | {cells} | {best} | {ratio} |")
PY
if [ -n "$OUT" ]; then
  { echo; echo "### Tuning table, $(date -u +%F) ($(nproc) cores, $RANKS ranks, $REPS reps, \`bench/tune/run.sh\`)"; echo
    cat "$LOG/table.md"; } >>"$OUT"
fi
