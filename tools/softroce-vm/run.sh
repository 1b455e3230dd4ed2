#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# run.sh — run host-built test programs against a real kernel Soft-RoCE device (rdma_rxe) inside a qemu VM.
#
# Boots Debian's own kernel (linux-image-amd64's dependency, downloaded and unpacked into a cache, never
# installed on the host) under qemu TCG (KVM on request) into a busybox initramfs, creates rxe0,
# prints the device once, runs every TEST command in ONE boot and summarizes.
# Non-goals: performance measurement (TCG makes latency and bandwidth meaningless), more than two VMs,
# reaching any network outside the VM(s), running on non-Debian hosts.
#
# Usage: tools/softroce-vm/run.sh [OPTIONS] -- 'TEST [ARGS...]' ['TEST [ARGS...]' ...]
#   Each TEST is one shell command line. Its first word is a host file (a path, or a command name looked up
#   in PATH) that is copied into the VM together with its ldd closure; it runs in the guest under busybox
#   `sh -c`, in a directory with the same path as the host's current one, so relative paths work.
# Options:
#   --two-vm          boot two VMs (1 vCPU each) joined by a private qemu dgram link over unix sockets, run
#                     every TEST on both at once (a barrier before each); ZW_SOFTROCE_RANK tells them apart
#   --net virtio|dummy  single-VM netdev for rxe0: virtio NIC on user-mode net with restrict=on and no
#                     forwards (default), or no NIC at all (rxe0 on dummy0)
#   --env NAME=VALUE  export into every guest test (repeatable)
#   --file PATH       also copy PATH (and its libraries) into the VM at the same path (repeatable)
#   --timeout SEC     kill qemu after SEC seconds of VM time (default 900): exit 124
#   --mem SIZE        guest memory per VM (default 1G)
#   --accel tcg|kvm   qemu accelerator (default tcg; kvm only where nested KVM really works)
#   --no-install      never call apt-get; a missing package is a skip
#   --verbose         print all of `ibv_devinfo -v` for each VM (default: one line of it)
#   -h, --help        this text
# In every guest test: ZW_SOFTROCE_DEV=rxe0, ZW_SOFTROCE_GID_INDEX (IPv4-mapped RoCE v2 GID),
#   ZW_SOFTROCE_IP (own address), ZW_SOFTROCE_RANK, ZW_SOFTROCE_NVMS, and with --two-vm ZW_SOFTROCE_PEER_IP.
# Environment: ZW_SOFTROCE_CACHE (default /tmp/zw-softroce-cache), ZW_SOFTROCE_KPKG (kernel package to use).
# Output: the device (rdma link, a line of ibv_devinfo, GID table), each test's output, then the last line
#   "N passed, M failed" (plus ", K skipped"). A test exiting 77 is skipped.
# Exit: 0 all passed (or some skipped); 1 a test failed or the guest broke; 77 every test skipped, or the VM
#   cannot start ("SKIPPED: <reason>"); 124 --timeout hit; 2 usage error.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${ZW_SOFTROCE_CACHE:-/tmp/zw-softroce-cache}
TWO_VM=0
NET=virtio
TIMEOUT=900
MEM=1G
ACCEL=tcg
DO_INSTALL=1
VERBOSE=0
ENVS=()
FILES=()
TESTS=()

log() { printf '[softroce-vm +%ss] %s\n' "$SECONDS" "$*" >&2; }
die() {
  printf 'run.sh: %s\n' "$*" >&2
  exit 2
}
skip() {
  printf 'SKIPPED: %s\n' "$*"
  exit 77
}
usage() { sed -n '/^# run.sh/,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

# shellcheck source=image.sh
. "$HERE/image.sh"

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --two-vm) TWO_VM=1 ;;
      --net) NET=${2:?--net needs a value} && shift ;;
      --env) ENVS+=("${2:?--env needs NAME=VALUE}") && shift ;;
      --file) FILES+=("${2:?--file needs a path}") && shift ;;
      --timeout) TIMEOUT=${2:?--timeout needs seconds} && shift ;;
      --mem) MEM=${2:?--mem needs a size} && shift ;;
      --accel) ACCEL=${2:?--accel needs tcg or kvm} && shift ;;
      --no-install) DO_INSTALL=0 ;;
      --verbose) VERBOSE=1 ;;
      -h | --help) usage && exit 0 ;;
      --) shift && break ;;
      *) die "unknown option '$1' (tests go after --; see --help)" ;;
    esac
    shift
  done
  TESTS=("$@")
  [ ${#TESTS[@]} -gt 0 ] || die "no tests given (usage: run.sh [OPTIONS] -- 'TEST [ARGS]'...; see --help)"
  [[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout wants a positive number of seconds, got '$TIMEOUT'"
  [[ $NET == virtio || $NET == dummy ]] || die "--net must be virtio or dummy, got '$NET'"
  [[ $ACCEL == tcg || $ACCEL == kvm ]] || die "--accel must be tcg or kvm, got '$ACCEL'"
  local kv
  for kv in "${ENVS[@]+"${ENVS[@]}"}"; do
    [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env wants NAME=VALUE, got '$kv'"
    [[ $kv != *$'\n'* ]] || die "--env value of ${kv%%=*} contains a newline"
  done
}

# host_file WORD: the host path a test's first word names (absolute, symlinks kept so the guest path matches)
host_file() {
  local w=$1 p
  if [[ $w == */* ]]; then
    p=$w
    [[ $p == /* ]] || p=$PWD/$p
  else
    p=$(command -v "$w") || die "test program '$w' not found in PATH"
  fi
  [ -f "$p" ] || die "test program '$p' does not exist (build it first)"
  echo "$p"
}

# build_payload DIR: the per-run cpio (tests, their files and libraries, configuration) appended to the base
build_payload() {
  local dir=$1 root=$1/root i=0 t first p f
  mkdir -p "$root/zw/tests"
  for t in "${TESTS[@]}"; do
    i=$((i + 1))
    [[ $t != *$'\n'* ]] || die "test $i contains a newline"
    read -r first _ <<<"$t"
    p=$(host_file "$first")
    copy_with_libs "$root" "$p"
    printf '%s\n' "$t" >"$root/zw/tests/$(printf '%03d' "$i").cmd"
  done
  for f in "${FILES[@]+"${FILES[@]}"}"; do
    [ -f "$f" ] || die "--file $f does not exist"
    [[ $f == /* ]] || f=$PWD/$f
    copy_with_libs "$root" "$f"
  done
  # Libraries already in the base image need not travel twice.
  (cd "$root" && find . -type f -path './usr/*' -print0) | while IFS= read -r -d '' f; do
    if cmp -s "$root/$f" "$BASE_ROOT/$f"; then rm -f "$root/$f"; fi
  done
  printf '%s\n' "${ENVS[@]+"${ENVS[@]}"}" | sed '/^$/d' >"$root/zw/env"
  printf '%s\n' "$PWD" >"$root/zw/cwd"
  local ips="10.0.2.15" prefix=24
  [ "$TWO_VM" = 1 ] && ips="10.0.9.1 10.0.9.2"
  cat >"$root/zw/run.conf" <<EOF
ZW_NONCE=$NONCE
ZW_NET=$([ "$TWO_VM" = 1 ] && echo wire || echo "$NET")
ZW_IPS="$ips"
ZW_PREFIX=$prefix
ZW_NVMS=$((TWO_VM + 1))
ZW_VERBOSE=$VERBOSE
EOF
  pack "$root" "$dir/payload.cpio.gz"
  cat "$BASE" "$dir/payload.cpio.gz" >"$dir/initrd.img"
}

# qemu_args RANK: the command line of one VM; nothing it runs can reach a network outside the VM(s)
qemu_args() {
  local rank=$1 accel=tcg,thread=multi smp=2 nic
  [ "$ACCEL" = kvm ] && accel=kvm
  [ "$TWO_VM" = 1 ] && smp=1
  QEMU=(qemu-system-x86_64 -machine q35 -accel "$accel" -cpu max -m "$MEM" -smp "$smp"
    -kernel "$KDIR/boot/vmlinuz-$KVER" -initrd "$RUN/initrd.img"
    -append "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off zw.rank=$rank"
    -display none -serial stdio -monitor none -no-reboot)
  # speed/duplex: without them rxe logs "speed is unknown" on every port query
  nic="virtio-net-pci,netdev=n0,speed=10000,duplex=full,mac=52:54:00:5a:57:0$((rank + 1))"
  if [ "$TWO_VM" = 1 ]; then
    QEMU+=(-netdev "dgram,id=n0,local.type=unix,local.path=$RUN/vm$rank.sock,remote.type=unix,remote.path=$RUN/vm$((1 - rank)).sock"
      -device "$nic")
  elif [ "$NET" = virtio ]; then
    QEMU+=(-netdev "user,id=n0,restrict=on" -device "$nic")
  else
    QEMU+=(-nic none)
  fi
}

# show_console RANK: prints the console of one VM (prefixed with --two-vm), hiding the marker lines
show_console() {
  local prefix="" line
  [ "$TWO_VM" = 1 ] && prefix="[vm$1] "
  while IFS= read -r line; do
    line=${line%$'\r'}
    printf '%s\n' "$line" 2>/dev/null >>"$RUN/console$1.log" || true  # the log is a copy: never stop the output
    case "$line" in
      "@@ZW:$NONCE:ready:"*) log "vm$1 ready (rxe0 up) at guest uptime ${line##*:} s" ;;
      "@@ZW:$NONCE:"*) ;;
      *) printf '%s%s\n' "$prefix" "$line" ;;
    esac
  done
}

# boot_vms: runs the VM(s) to completion; QEMU_RC[r] is qemu's exit code (124 when the timeout killed it)
boot_vms() {
  local r n=$((TWO_VM + 1)) pids=()
  for ((r = 0; r < n; r++)); do
    qemu_args "$r"
    { timeout -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 || echo $? >"$RUN/qemu$r.rc"; } | show_console "$r" &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    wait "${pids[$r]}" || true
    QEMU_RC[r]=$(cat "$RUN/qemu$r.rc" 2>/dev/null || echo 0)
  done
}

# marker_of RANK EVENT: the fields after "@@ZW:<nonce>:EVENT:" of the last such line of a VM's console
marker_of() {
  grep -a "^@@ZW:$NONCE:$2:" "$RUN/console$1.log" 2>/dev/null | tail -1 | sed "s/^@@ZW:$NONCE:$2://" || true
}

# check_vm RANK: decides whether a VM that produced no results could not start (skip) or broke (fail)
check_vm() {
  local r=$1 reason
  [ -n "$(marker_of "$r" booted)" ] && return 0
  [ "${QEMU_RC[r]}" = 124 ] && return 0
  if [ "${QEMU_RC[r]}" != 0 ]; then
    reason=$(grep -av '^@@ZW' "$RUN/console$r.log" | sed '/^$/d' | tail -1)
    skip "qemu exited with code ${QEMU_RC[r]} before the guest booted: ${reason:-no output}"
  fi
  echo "vm$r: the guest kernel never reached /init (console: $RUN/console$r.log)" >&2
}

# summarize: per-test verdicts from the result markers of every VM, the final line, and the exit code
summarize() {
  local i r rc n=$((TWO_VM + 1)) passed=0 failed=0 skipped=0 verdict any_timeout=0 setup
  for ((r = 0; r < n; r++)); do
    check_vm "$r"
    setup=$(marker_of "$r" setup-failed)
    [ -z "$setup" ] || echo "vm$r: guest setup failed: $setup" >&2
    [ "${QEMU_RC[r]}" = 124 ] && any_timeout=1
  done
  for ((i = 1; i <= ${#TESTS[@]}; i++)); do
    verdict=pass
    for ((r = 0; r < n; r++)); do
      rc=$(marker_of "$r" "result:$i" | cut -d: -f1)
      case "$rc" in
        0) ;;
        77) [ "$verdict" = fail ] || verdict=skip ;;
        *) verdict=fail ;;
      esac
    done
    case $verdict in pass) passed=$((passed + 1)) ;; skip) skipped=$((skipped + 1)) ;; *) failed=$((failed + 1)) ;; esac
  done
  if [ "$any_timeout" = 1 ]; then
    local running
    running=$(marker_of 0 start)
    echo "TIMEOUT: qemu killed after ${TIMEOUT} s (--timeout); test ${running:-?} of ${#TESTS[@]} was running" \
      "${running:+(${TESTS[running - 1]})}" >&2
  fi
  log "console logs: $RUN/console*.log"
  if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
  else
    echo "$passed passed, $failed failed"
  fi
  [ "$any_timeout" = 1 ] && exit 124
  [ "$failed" -gt 0 ] && exit 1
  [ "$passed" -eq 0 ] && exit 77
  exit 0
}

main() {
  parse_args "$@"
  install_packages
  command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not found after installing qemu-system-x86"
  mkdir -p "$CACHE" || skip "cannot create cache dir $CACHE"
  check_space "$CACHE" 50
  exec 9>"$CACHE/.lock"
  flock 9 # one build at a time per cache; boots run concurrently
  resolve_kernel
  fetch_kernel
  build_base
  flock -u 9
  NONCE=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
  mkdir -p "$CACHE/runs"
  # keep the last 5 run directories (console logs) for post-mortems; a run still going holds the lock on its
  # directory's .busy (fd 8, for its whole life) and is never pruned by a run that starts beside it
  find "$CACHE/runs" -mindepth 1 -maxdepth 1 -type d | sort | head -n -5 | while read -r old; do
    [ -e "$old/.busy" ] && ! flock -n "$old/.busy" true && continue
    rm -rf "$old"
  done
  RUN=$(mktemp -d "$CACHE/runs/$(date +%Y%m%d-%H%M%S).XXXX")
  exec 8>"$RUN/.busy"
  flock 8
  build_payload "$RUN"
  log "kernel $KPKG $KPKG_VERSION; initrd $(du -h "$RUN/initrd.img" | cut -f1); booting $((TWO_VM + 1)) VM(s)"
  QEMU_RC=()
  boot_vms
  log "qemu exited"
  summarize
}

main "$@"
