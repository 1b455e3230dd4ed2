#!/usr/bin/env bash
# bench/compare/run.sh: zerowire's host-memory collectives (shm with plain buffers and with zw::mem_alloc
# buffers, tcp) and shm point-to-point measured side by side with Open MPI (ob1 over vader or tcp), Gloo (TCP on
# 127.0.0.1) and UCX (ucx_perftest over posix and sysv shared memory), runs interleaved (zerowire, anchor,
# zerowire, anchor, ...), plus this machine's single-thread memcpy / a+=b limits; then one table
# (bench/compare/report.py) on stdout and appended to a markdown file.
#
# Steps: install missing Debian packages (dpkg-query first), build zerowire (Release) and the anchor drivers
# (bench/compare/CMakeLists.txt, a separate project), run, report. An anchor that cannot be installed, built or
# run becomes "n/a (reason)" in its column; the rest still runs. Run with --help for the options.
#
# Non-goals: tuning the anchors, multi-host runs, GPU memory, deciding anything (the table is the output).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/compare"
COMMAND_LINE="bench/compare/run.sh$(printf ' %q' "$@")"

# ---- options -----------------------------------------------------------------------------------------------
QUICK=0
REPS=3
RANKS="2 4"
COLLS="all_gather reduce_scatter"
PAIRS="shm-ompi shmreg-ompi tcp-ompi tcp-gloo"
SIZES="4K:256M:4"
ITERS=20
WARMUP=5
BLOCKING=0
P2P=1
P2P_SIZES="65536 1048576 8388608"
LAT_ITERS=10000
LIMITS=1
INSTALL=1
BUILD=1
BUILD_RETRIES=2
BUILD_DIR="${ZWCMP_BUILD_DIR:-build}"
OUT_FILE=""
RESULTS=""
JOB_TIMEOUT=900

usage() {
  cat <<EOF
usage: bench/compare/run.sh [options]

Measures zerowire against Open MPI, Gloo and UCX on this machine, interleaved, and prints one table.

  --quick             smoke test: 1 repetition, 2 ranks, sizes 4K 256K 16M, -n 5 -w 1, p2p at 1 MiB,
                      and the section goes to the results directory unless --out is given
  --reps N            repetitions of every measurement, interleaved (default $REPS)
  --ranks "LIST"      rank counts (default "$RANKS")
  --colls "LIST"      collectives: all_gather reduce_scatter (default both)
  --pairs "LIST"      comparisons: shm-ompi (zerowire shm vs Open MPI ob1/vader), shmreg-ompi (zerowire shm
                      with zw::mem_alloc buffers, -R 1, vs the same Open MPI ob1/vader runs), tcp-ompi
                      (zerowire tcp vs Open MPI ob1/tcp on lo), tcp-gloo (zerowire tcp vs Gloo tcp);
                      default all four
  --sizes MIN:MAX:F   collective sizes, nccl-tests -b/-e/-f (default $SIZES)
  --iters N, --warmup N   timed and warm-up iterations per size (default $ITERS, $WARMUP)
  --blocking          zerowire waits for each timed operation before issuing the next (-z 1), as the anchors'
                      blocking calls do (default: issues the size's operations, then waits, as nccl-tests does)
  --p2p-sizes "LIST"  bandwidth sizes in bytes for zw_write_bw vs ucx_perftest tag_bw (default "$P2P_SIZES");
                      latency is always 8 bytes (zw_write_lat vs tag_lat, $LAT_ITERS iterations)
  --no-p2p            skip the point-to-point comparison
  --no-limits         skip the limit probes (memcpy, a+=b, process_vm_readv, loopback TCP)
  --no-install        never call apt-get (missing anchors become n/a)
  --no-build          use the zerowire binaries already in the build directory (drivers are still built)
  --build-retries N   retries of a failed zerowire build, 60 s apart (default 2)
  --build-dir DIR     zerowire build directory (default \$ZWCMP_BUILD_DIR or build); drivers go to DIR/compare
  --out FILE          markdown file the section is appended to (default docs/PERF-compare.md)
  --results DIR       where raw logs go (default BUILD_DIR/compare-results/DATE-TIME)
  --timeout S         limit for one benchmark process (default $JOB_TIMEOUT s)
  -h, --help          this help

One configuration, e.g. n=2 shm all_gather once:
  bench/compare/run.sh --reps 1 --ranks 2 --colls all_gather --pairs shm-ompi --no-p2p --no-limits
EOF
}

die() { echo "compare: error: $*" >&2; exit 1; }
log() { echo "compare: $*" >&2; }

need_value() { [ $# -ge 2 ] || die "option $1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --reps) need_value "$@"; REPS="$2"; shift ;;
    --ranks) need_value "$@"; RANKS="$2"; shift ;;
    --colls) need_value "$@"; COLLS="$2"; shift ;;
    --pairs) need_value "$@"; PAIRS="$2"; shift ;;
    --sizes) need_value "$@"; SIZES="$2"; shift ;;
    --iters) need_value "$@"; ITERS="$2"; shift ;;
    --warmup) need_value "$@"; WARMUP="$2"; shift ;;
    --blocking) BLOCKING=1 ;;
    --p2p-sizes) need_value "$@"; P2P_SIZES="$2"; shift ;;
    --no-p2p) P2P=0 ;;
    --no-limits) LIMITS=0 ;;
    --no-install) INSTALL=0 ;;
    --no-build) BUILD=0 ;;
    --build-retries) need_value "$@"; BUILD_RETRIES="$2"; shift ;;
    --build-dir) need_value "$@"; BUILD_DIR="$2"; shift ;;
    --out) need_value "$@"; OUT_FILE="$2"; shift ;;
    --results) need_value "$@"; RESULTS="$2"; shift ;;
    --timeout) need_value "$@"; JOB_TIMEOUT="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done

if [ "$QUICK" = 1 ]; then
  REPS=1; RANKS="2"; SIZES="4K:16M:64"; ITERS=5; WARMUP=1; P2P_SIZES="1048576"; LAT_ITERS=2000
fi
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer, got '$REPS'"
[[ "$SIZES" =~ ^[0-9]+[KMG]?:[0-9]+[KMG]?:[0-9.]+$ ]] || die "--sizes must look like 4K:256M:4, got '$SIZES'"
IFS=: read -r SIZE_MIN SIZE_MAX SIZE_FACTOR <<<"$SIZES"
for c in $COLLS; do [[ "$c" =~ ^(all_gather|reduce_scatter)$ ]] || die "unknown collective '$c'"; done
for p in $PAIRS; do [[ "$p" =~ ^(shm-ompi|shmreg-ompi|tcp-ompi|tcp-gloo)$ ]] || die "unknown pair '$p'"; done

cd "$ROOT"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
DRIVERS="$BUILD_DIR/compare"
RESULTS="${RESULTS:-$BUILD_DIR/compare-results/$(date +%Y%m%d-%H%M%S)}"
if [ -z "$OUT_FILE" ]; then
  if [ "$QUICK" = 1 ]; then OUT_FILE="$RESULTS/PERF-compare.md"; else OUT_FILE="$ROOT/docs/PERF-compare.md"; fi
fi
mkdir -p "$RESULTS/logs"
MANIFEST="$RESULTS/manifest.tsv"     # kind  key  n|size  impl  rep  rc  log
UNAVAILABLE="$RESULTS/unavailable.tsv"  # impl  reason
META="$RESULTS/meta.tsv"             # key  value
: >"$MANIFEST"; : >"$UNAVAILABLE"; : >"$META"

unavailable() {  # impl reason
  log "$1 unavailable: $2"
  printf '%s\t%s\n' "$1" "$2" >>"$UNAVAILABLE"
}
is_unavailable() { grep -q "^$1"$'\t' "$UNAVAILABLE"; }

# ---- 1. packages -------------------------------------------------------------------------------------------
is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }

# Installs the missing packages of one group; prints nothing and returns 1 with a reason in $INSTALL_ERROR.
APT_UPDATED=0
install_group() {
  local missing=() p
  for p in "$@"; do is_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$INSTALL" = 0 ]; then INSTALL_ERROR="not installed (${missing[*]}) and --no-install given"; return 1; fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { INSTALL_ERROR="${missing[*]} missing; not root and no sudo"; return 1; }
    sudo=(sudo)
  fi
  log "installing ${missing[*]} (apt-get; waits up to 10 min for the dpkg lock)"
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -q)
  if ! "${apt[@]}" install --no-install-recommends "${missing[@]}" >>"$RESULTS/apt.log" 2>&1; then
    if [ "$APT_UPDATED" = 0 ]; then
      APT_UPDATED=1
      "${apt[@]}" update >>"$RESULTS/apt.log" 2>&1 || true
      "${apt[@]}" install --no-install-recommends "${missing[@]}" >>"$RESULTS/apt.log" 2>&1 && return 0
    fi
    INSTALL_ERROR="apt-get install ${missing[*]} failed: $(grep -E '^E:' "$RESULTS/apt.log" | tail -1)"
    return 1
  fi
}

INSTALL_ERROR=""
if [ -x "$ROOT/tools/install-deps.sh" ] && [ "$INSTALL" = 1 ]; then
  "$ROOT/tools/install-deps.sh" >&2 || die "tools/install-deps.sh failed: zerowire's own dependencies are missing"
fi
install_group cmake ninja-build g++ python3 || die "build tools: $INSTALL_ERROR"
install_group openmpi-bin libopenmpi-dev || { unavailable ompi "Open MPI: $INSTALL_ERROR"; }
install_group libgloo-dev || { unavailable gloo "Gloo: $INSTALL_ERROR"; }
install_group ucx-utils || { unavailable ucx "UCX: $INSTALL_ERROR"; }

# ---- 2. builds ---------------------------------------------------------------------------------------------
build_zerowire() {
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
    ninja -C "$BUILD_DIR" zwrun zw_all_gather_perf zw_reduce_scatter_perf zw_write_bw zw_write_lat
}
if [ "$BUILD" = 1 ]; then
  # Other engineers edit other folders of this tree: a failed configure or build is retried after a minute.
  for attempt in $(seq 0 "$BUILD_RETRIES"); do
    log "building zerowire (Release) in $BUILD_DIR, attempt $((attempt + 1))/$((BUILD_RETRIES + 1))"
    build_zerowire >"$RESULTS/build-zerowire.log" 2>&1 && break
    if [ "$attempt" -ge "$BUILD_RETRIES" ]; then
      tail -20 "$RESULTS/build-zerowire.log" >&2
      die "zerowire did not build (full log: $RESULTS/build-zerowire.log); if another engineer's folder is mid-edit, retry later or pass --no-build to use the binaries already in $BUILD_DIR"
    fi
    log "zerowire did not build ($(grep -m1 -E 'error|Error' "$RESULTS/build-zerowire.log" | cut -c1-100)); retrying in 60 s"
    sleep 60
  done
fi
for bin in tools/zwrun bench/zw_all_gather_perf bench/zw_reduce_scatter_perf bench/zw_write_bw bench/zw_write_lat; do
  [ -x "$BUILD_DIR/$bin" ] || die "$BUILD_DIR/$bin is missing (build it, or drop --no-build)"
done
log "building the anchor drivers in $DRIVERS"
{ cmake -S "$HERE" -B "$DRIVERS" -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -k 0 -C "$DRIVERS"; } \
  >"$RESULTS/build-compare.log" 2>&1 || log "some anchor drivers did not build (see $RESULTS/build-compare.log)"
if ! is_unavailable ompi; then
  if ! command -v mpirun >/dev/null 2>&1; then unavailable ompi "mpirun not on PATH"
  elif [ ! -x "$DRIVERS/mpi_coll_bench" ]; then unavailable ompi "mpi_coll_bench did not build (see $RESULTS/build-compare.log)"
  fi
fi
if ! is_unavailable gloo && [ ! -x "$DRIVERS/gloo_coll_bench" ]; then
  unavailable gloo "gloo_coll_bench did not build (see $RESULTS/build-compare.log)"
fi
if ! is_unavailable ucx && ! command -v ucx_perftest >/dev/null 2>&1; then unavailable ucx "ucx_perftest not on PATH"; fi
[ -x "$DRIVERS/mem_limits" ] || { LIMITS=0; log "mem_limits did not build (see $RESULTS/build-compare.log)"; }

ZW="$BUILD_DIR/bench"
ZWRUN="$BUILD_DIR/tools/zwrun"
MPIRUN=(mpirun --oversubscribe --bind-to none --mca oob_tcp_if_include lo)
if [ "$(id -u)" -eq 0 ]; then
  MPIRUN+=(--allow-run-as-root)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
MCA_VADER=(--mca pml ob1 --mca btl "vader,self")
MCA_TCP=(--mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include lo)

{
  printf 'date\t%s\n' "$(date '+%Y-%m-%d %H:%M %Z')"
  printf 'command\t%s\n' "$COMMAND_LINE"
  printf 'zerowire\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
  for p in openmpi-bin libgloo-dev ucx-utils; do printf 'pkg %s\t%s\n' "$p" "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo none)"; done
  printf 'reps\t%s\n' "$REPS"
  printf 'sizes\t-b %s -e %s -f %s, -n %s -w %s%s\n' "$SIZE_MIN" "$SIZE_MAX" "$SIZE_FACTOR" "$ITERS" "$WARMUP" \
    "$([ "$BLOCKING" = 1 ] && echo ', zerowire -z 1')"
  printf 'quick\t%s\n' "$QUICK"
  printf 'lat_iters\t%s\n' "$LAT_ITERS"
  printf 'timeout\t%s\n' "$JOB_TIMEOUT"
} >>"$META"

# ---- 3. runs -----------------------------------------------------------------------------------------------
# Runs one benchmark process under the time limit and records it: run_job KIND KEY N IMPL REP -- COMMAND...
run_job() {
  local kind="$1" key="$2" n="$3" impl="$4" rep="$5"; shift 6
  local logf="$RESULTS/logs/$kind.$key.$n.$impl.rep$rep.log" rc=0 t0=$SECONDS
  timeout --kill-after=10 "$JOB_TIMEOUT" "$@" >"$logf" 2>&1 </dev/null || rc=$?
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$key" "$n" "$impl" "$rep" "$rc" "$logf" >>"$MANIFEST"
  local what="rep $rep/$REPS $kind $key n=$n $impl: $((SECONDS - t0)) s"
  if [ "$rc" = 0 ]; then log "$what"; else log "$what, FAILED (exit $rc; $(tail -1 "$logf" | cut -c1-120))"; fi
}

COLL_FLAGS=(-b "$SIZE_MIN" -e "$SIZE_MAX" -f "$SIZE_FACTOR" -n "$ITERS" -w "$WARMUP" -c 1 -d float -o sum)
run_zw_coll() {  # coll n transport rep [impl extra-flags...] (impl defaults to zw-TRANSPORT)
  local coll="$1" n="$2" transport="$3" rep="$4" impl="zw-$3"
  shift 4
  if [ $# -gt 0 ]; then impl="$1"; shift; fi
  run_job coll "$coll" "$n" "$impl" "$rep" -- "$ZWRUN" -n "$n" --transport "$transport" -- \
    "$ZW/zw_${coll}_perf" "${COLL_FLAGS[@]}" -z "$BLOCKING" "$@"
}
run_ompi_coll() {  # coll n impl rep MCA...
  local coll="$1" n="$2" impl="$3" rep="$4"; shift 4
  run_job coll "$coll" "$n" "$impl" "$rep" -- "${MPIRUN[@]}" -np "$n" "$@" \
    "$DRIVERS/mpi_coll_bench" "$coll" "${COLL_FLAGS[@]}" -t "$impl"
}
run_gloo_coll() {  # coll n rep
  local store
  store="$(mktemp -d "$RESULTS/gloo-store.XXXXXX")"
  run_job coll "$1" "$2" gloo-tcp "$3" -- "$ZWRUN" -n "$2" -- \
    "$DRIVERS/gloo_coll_bench" "$1" "${COLL_FLAGS[@]}" -t tcp-127.0.0.1 --store "$store"
  rm -rf "$store"
}

has_pair() { [[ " $PAIRS " == *" $1 "* ]]; }

# ucx_perftest as a server and a client on 127.0.0.1 (the server's log is appended to the client's).
UCX_PORT=$((20000 + RANDOM % 20000))
ucx_pair() {  # tls test size iters
  local tls="$1" test="$2" size="$3" iters="$4" port=$((UCX_PORT++)) server_log rc=0 spid
  server_log="$(mktemp "$RESULTS/ucx-server.XXXXXX")"
  UCX_TLS="$tls" timeout --kill-after=5 "$JOB_TIMEOUT" ucx_perftest -p "$port" >"$server_log" 2>&1 &
  spid=$!
  if command -v ss >/dev/null 2>&1; then
    for _ in $(seq 100); do
      ss -ltn "sport = :$port" 2>/dev/null | grep -q LISTEN && break
      kill -0 "$spid" 2>/dev/null || break
      sleep 0.1
    done
  else
    sleep 1
  fi
  UCX_TLS="$tls" ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" -w $((iters / 10 + 1)) || rc=$?
  if [ "$rc" != 0 ]; then kill "$spid" 2>/dev/null || true; fi
  wait "$spid" 2>/dev/null || true
  echo "---- server ----"; cat "$server_log"; rm -f "$server_log"
  return "$rc"
}
export -f ucx_pair
export RESULTS JOB_TIMEOUT

run_p2p() {  # rep
  local rep="$1" size iters
  for size in $P2P_SIZES; do
    iters=$(( (1 << 30) / size ))  # about 1 GiB per run (256 MiB in --quick), 200..5000 messages
    if [ "$QUICK" = 1 ]; then iters=$(( (1 << 28) / size )); fi
    if [ "$iters" -gt 5000 ]; then iters=5000; fi
    if [ "$iters" -lt 200 ]; then iters=200; fi
    run_job p2p bw "$size" zw-shm "$rep" -- "$ZWRUN" -n 2 --transport shm -- "$ZW/zw_write_bw" -s "$size" -n "$iters" --report_gbits
    if ! is_unavailable ucx; then
      for tls in posix sysv; do
        UCX_PORT=$((UCX_PORT + 1))
        run_job p2p bw "$size" "ucx-$tls" "$rep" -- bash -c "UCX_PORT=$UCX_PORT; ucx_pair $tls,self tag_bw $size $iters"
      done
    fi
  done
  run_job p2p lat 8 zw-shm "$rep" -- "$ZWRUN" -n 2 --transport shm -- "$ZW/zw_write_lat" -s 8 -n "$LAT_ITERS"
  if ! is_unavailable ucx; then
    for tls in posix sysv; do
      UCX_PORT=$((UCX_PORT + 1))
      run_job p2p lat 8 "ucx-$tls" "$rep" -- bash -c "UCX_PORT=$UCX_PORT; ucx_pair $tls,self tag_lat 8 $LAT_ITERS"
    done
  fi
}

log "results and raw logs: $RESULTS"
for rep in $(seq "$REPS"); do
  if [ "$LIMITS" = 1 ]; then run_job limits mem 1 local "$rep" -- "$DRIVERS/mem_limits" 256 7; fi
  for n in $RANKS; do
    for coll in $COLLS; do
      if has_pair shm-ompi || has_pair shmreg-ompi; then  # both pairs compare against the same vader runs
        if has_pair shm-ompi; then run_zw_coll "$coll" "$n" shm "$rep"; fi
        if has_pair shmreg-ompi; then run_zw_coll "$coll" "$n" shm "$rep" zw-shmreg -R 1; fi
        is_unavailable ompi || run_ompi_coll "$coll" "$n" ompi-vader "$rep" "${MCA_VADER[@]}"
      fi
      if has_pair tcp-ompi || has_pair tcp-gloo; then
        run_zw_coll "$coll" "$n" tcp "$rep"
        if has_pair tcp-ompi && ! is_unavailable ompi; then run_ompi_coll "$coll" "$n" ompi-tcp "$rep" "${MCA_TCP[@]}"; fi
        if has_pair tcp-gloo && ! is_unavailable gloo; then run_gloo_coll "$coll" "$n" "$rep"; fi
      fi
    done
  done
  if [ "$P2P" = 1 ]; then run_p2p "$rep"; fi
done

# ---- 4. report ---------------------------------------------------------------------------------------------
python3 "$HERE/report.py" --results "$RESULTS" --out "$OUT_FILE" --pairs "$PAIRS"
log "section appended to $OUT_FILE; raw logs in $RESULTS"
