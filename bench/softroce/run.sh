#!/usr/bin/env bash
# bench/softroce/run.sh — zerowire's zw_write_bw / zw_write_lat over --transport verbs against perftest's
# ib_write_bw / ib_write_lat on the same Soft-RoCE device, in ONE VM boot (tools/softroce-vm/run.sh), interleaved
# A B A B, and prints a table of medians with the ratios zerowire/perftest (goals: bandwidth >= 0.9,
# latency <= 1.1).
#
# Usage: bench/softroce/run.sh [--build DIR] [--runs N] [--lat-size BYTES] [--same-cpu] [--record]
#   --build DIR  build tree with zwrun, zw_write_bw, zw_write_lat (default: build)
#   --runs N     runs of each tool and test (default 5; the median is reported)
#   --lat-size B latency message size (default 8; the issue's second point is 65536, run with 200 round trips)
#   --same-cpu   both sides of each tool on vCPU 0 (default: sender on vCPU 0, receiver on vCPU 1)
#   --record     append the table, with the date, to docs/PERF.md
# Sizes: bandwidth at 64 KiB, latency at 8 bytes (or --lat-size); perftest's ib_send_lat runs too, as a two-sided reference.
# Needs perftest on the host (installed with apt-get when missing and running as root): its binaries are copied
# into the VM. The medians and the best run of each are printed (the best is the least disturbed by other load).
# Non-goals: absolute numbers (TCG emulation makes them meaningless; only the ratios on the same device and boot
# say something), a size sweep, two VMs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build
RUNS=5
RECORD=0
CPU1=1
BW_SIZE=65536 BW_ITERS=2000 LAT_SIZE=8 LAT_ITERS=1000

while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$(cd "${2:?--build needs a directory}" && pwd) && shift ;;
    --runs) RUNS=${2:?--runs needs a number} && shift ;;
    --lat-size) LAT_SIZE=${2:?--lat-size needs a byte count} && shift ;;
    --record) RECORD=1 ;;
    --same-cpu) CPU1=0 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --runs wants a positive number, got $RUNS" >&2; exit 2; }
[[ $LAT_SIZE =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --lat-size wants a positive byte count, got $LAT_SIZE" >&2; exit 2; }
[ "$LAT_SIZE" -le 65536 ] || LAT_ITERS=100
[ "$LAT_SIZE" -le 4096 ] || [ "$LAT_SIZE" -gt 65536 ] || LAT_ITERS=200

for b in tools/zwrun bench/zw_write_bw bench/zw_write_lat; do
  [ -x "$BUILD/$b" ] || { echo "run.sh: $BUILD/$b is missing; build zwrun zw_write_bw zw_write_lat first" >&2; exit 2; }
done
if ! command -v ib_write_bw >/dev/null || ! command -v ib_write_lat >/dev/null || ! command -v ib_send_lat >/dev/null; then
  [ "$(id -u)" -eq 0 ] || { echo "run.sh: perftest is not installed (apt-get install perftest)" >&2; exit 77; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends perftest >/dev/null
fi

LOAD_BEFORE=$(cut -d' ' -f1 /proc/loadavg)
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
set +e
"$ROOT/tools/softroce-vm/run.sh" --timeout 1500 \
  --file "$(command -v ib_write_bw)" --file "$(command -v ib_write_lat)" --file "$(command -v ib_send_lat)" \
  --file "$BUILD/tools/zwrun" --file "$BUILD/bench/zw_write_bw" --file "$BUILD/bench/zw_write_lat" -- \
  "$ROOT/bench/softroce/guest.sh $RUNS $BW_SIZE $BW_ITERS $LAT_SIZE $LAT_ITERS $BUILD/tools/zwrun $BUILD/bench/zw_write_bw $BUILD/bench/zw_write_lat $CPU1" \
  >"$OUT" 2>&1
VM_STATUS=$?
set -e
LOAD_AFTER=$(cut -d' ' -f1 /proc/loadavg)
grep '^RESULT ' "$OUT" || true
if [ $VM_STATUS -eq 0 ] && grep -q '^RESULT .* nan$' "$OUT"; then VM_STATUS=1; fi
if [ $VM_STATUS -ne 0 ]; then
  echo "run.sh: the VM run failed (exit $VM_STATUS); its output:" >&2
  tail -40 "$OUT" >&2
  exit "$VM_STATUS"
fi

TABLE=$(awk -v bw_size="$BW_SIZE" -v lat_size="$LAT_SIZE" '
  function sorted(list, a,   n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n
  }
  function median(list,   a, n) { n = sorted(list, a); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  function best(list, high,   a, n) { n = sorted(list, a); return high ? a[n] : a[1] }
  function row(name, size, key, high, goal,   pm, zm, pb, zb) {
    pm = median(v["perftest " key]); zm = median(v["zerowire " key])
    pb = best(v["perftest " key], high); zb = best(v["zerowire " key], high)
    printf "| %s | %d B | %.2f | %.2f | **%.2f** | %.2f | %.2f | %.2f | %s | %s / %s |\n", name, size, pm, zm,
           (pm > 0 ? zm / pm : 0), pb, zb, (pb > 0 ? zb / pb : 0), goal, all["perftest " key], all["zerowire " key]
  }
  $1 == "RESULT" { k = $2 " " $3; v[k] = v[k] " " $5; all[k] = all[k] (all[k] == "" ? "" : ", ") $5 }
  END {
    printf "| test | size | perftest median | zerowire median | ratio of medians | perftest best | zerowire best |"
    printf " ratio of bests | goal | runs perftest / zerowire |\n|---|---|---|---|---|---|---|---|---|---|\n"
    row("write bandwidth, MB/s (BW average)", bw_size, "bw", 1, ">= 0.9")
    row("write latency, us (t_typical)", lat_size, "lat", 0, "<= 1.1")
    v["perftest sendlat-ref"] = v["perftest sendlat"]; all["perftest sendlat-ref"] = all["perftest sendlat"]
    v["zerowire sendlat-ref"] = v["zerowire lat"]; all["zerowire sendlat-ref"] = all["zerowire lat"]
    row("reference: zw_write_lat vs ib_send_lat, us (t_typical)", lat_size, "sendlat-ref", 0, "-")
  }' "$OUT")
echo
echo "$TABLE"
echo "host load average (1 min) before / after: $LOAD_BEFORE / $LOAD_AFTER on $(nproc) CPUs"
CLOCKSOURCE=$(awk '$1 == "CLOCKSOURCE" { print $2; exit }' "$OUT")
echo "guest clocksource: ${CLOCKSOURCE:-unknown} (hpet: clock_gettime is a system call, about 0.9 us under TCG)"
if [ $RECORD = 1 ]; then
  {
    echo
    echo "## $(date -u +%Y-%m-%d) — Soft-RoCE: zerowire verbs vs perftest in one VM boot (bench/softroce/run.sh)"
    echo
    echo "\`bench/softroce/run.sh --runs $RUNS\`: one qemu TCG boot (2 vCPUs, rdma_rxe on virtio-net, kernel 6.1), runs"
    echo "interleaved perftest, zerowire, perftest, zerowire...; medians and best of $RUNS runs each (the best run is"
    echo "the least disturbed by other load on the host). Sender on vCPU 0, receiver on vCPU $CPU1 for both tools."
    echo "Bandwidth: ib_write_bw vs \`zwrun -n 2\` zw_write_bw (ZW_TRANSPORT=verbs), $BW_ITERS writes of $BW_SIZE B,"
    echo "BW average column. Latency: ib_write_lat vs zw_write_lat, $LAT_ITERS round trips of $LAT_SIZE B, t_typical"
    echo "(median) column. The last row compares zw_write_lat with perftest's two-sided ib_send_lat (a receive"
    echo "completion per message, as zerowire's notify needs; ib_write_lat polls the target memory instead). Under TCG"
    echo "the absolute numbers mean little; the ratio on the same device and boot is the point. Host load average"
    echo "(1 min) before / after the run: $LOAD_BEFORE / $LOAD_AFTER on $(nproc) CPUs shared with other work."
    echo
    echo "$TABLE"
  } >>"$ROOT/docs/PERF.md"
  echo "run.sh: appended to docs/PERF.md"
fi
