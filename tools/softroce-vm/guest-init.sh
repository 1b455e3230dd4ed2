#!/bin/sh
# guest-init.sh — PID 1 of the Soft-RoCE test VM (busybox sh; copied into the cached base initramfs as /init).
#
# Purpose: bring up a real kernel rdma_rxe device (rxe0) on the guest's only network device, print the device
# (rdma link, a line of `ibv_devinfo`, GID table) once, run the test commands the host put into /zw/tests/ in order,
# report each result on the serial console and power the VM off.
# Non-goals: a general init system, networking beyond the guest's own addresses (single VM: 127.0.0.1 and
# ZW_IP; --two-vm: the private wire between the two guests), persistence, interactive use.
#
# Contract with run.sh (the host side):
#   /zw/run.conf       shell variables written by run.sh: ZW_NONCE ZW_NET ZW_IPS ZW_PREFIX ZW_NVMS ZW_VERBOSE
#   /zw/env            NAME=VALUE lines from `run.sh --env`, exported to every test verbatim
#   /zw/cwd            the host's working directory; tests run there (relative paths work as on the host)
#   /zw/tests/NNN.cmd  one shell command line per test, run with `sh -c`
#   /etc/zw-modules    kernel modules (absolute paths) in load order
#   kernel cmdline     zw.rank=R (index of this VM, 0 in single-VM mode)
# Machine-readable lines are "@@ZW:<nonce>:<event>:..." so a test's own output can never forge them.
export PATH=/usr/local/bin:/usr/bin:/usr/sbin HOME=/root

mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm /tmp
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm # no tmpfs on /tmp: test files copied from the host's /tmp live there
echo 0 >/proc/sys/kernel/printk # kernel messages would interleave with test output
# shellcheck disable=SC3045 # busybox ash has ulimit -l
ulimit -l unlimited # ibv_reg_mr pins memory

# shellcheck source=/dev/null # written per run by run.sh
. /zw/run.conf
RANK=0
read -r cmdline </proc/cmdline
for arg in $cmdline; do
  case "$arg" in zw.rank=*) RANK=${arg#zw.rank=} ;; esac
done

uptime_s() { cut -d' ' -f1 /proc/uptime; }
marker() { echo "@@ZW:$ZW_NONCE:$*"; }
# nth_word N WORDS...: the Nth (0-based) of the remaining arguments
nth_word() {
  shift "$(($1 + 1))"
  echo "$1"
}
# setup_failed REASON: report why the device could not be brought up, then stop the VM
setup_failed() {
  echo "zw-softroce: guest setup failed: $*"
  dmesg | tail -30 | sed 's/^/dmesg: /'
  marker "setup-failed:$*"
  poweroff -f
}

# load_modules: insmod every module in the order the host computed from modules.dep
load_modules() {
  while read -r mod; do
    insmod "$mod" || setup_failed "insmod $mod"
  done </etc/zw-modules
}

# wait_for PATH: up to 10 s for a sysfs path to appear
wait_for() {
  i=0
  while [ ! -e "$1" ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  [ -e "$1" ]
}

# bring_up_net: the one netdev rxe0 binds to; sets NETDEV and MY_IP
bring_up_net() {
  ip link set lo up
  NETDEV=eth0
  [ "$ZW_NET" = dummy ] && NETDEV=dummy0
  if [ "$NETDEV" = dummy0 ] && [ ! -e /sys/class/net/dummy0 ]; then
    ip link add dummy0 type dummy || setup_failed "ip link add dummy0 type dummy"
  fi
  wait_for /sys/class/net/$NETDEV || setup_failed "no network device $NETDEV"
  # shellcheck disable=SC2086 # ZW_IPS is a space-separated list of plain IPv4 addresses
  MY_IP=$(nth_word "$RANK" $ZW_IPS)
  ip addr add "$MY_IP/$ZW_PREFIX" dev $NETDEV || setup_failed "ip addr add $MY_IP/$ZW_PREFIX dev $NETDEV"
  ip link set $NETDEV up || setup_failed "ip link set $NETDEV up"
}

# bring_up_rxe: create rxe0 and wait for an ACTIVE port with an IPv4-mapped (RoCE v2) GID; sets GID_INDEX
bring_up_rxe() {
  rdma link add rxe0 type rxe netdev "$NETDEV" || setup_failed "rdma link add rxe0 type rxe netdev $NETDEV"
  port=/sys/class/infiniband/rxe0/ports/1
  GID_INDEX=
  i=0
  while [ $i -lt 200 ]; do
    # one grep over the whole table: a process per GID file would cost seconds under TCG (1024 entries)
    g=$(grep -l '^0000:0000:0000:0000:0000:ffff:' "$port"/gids/* 2>/dev/null | head -n 1)
    GID_INDEX=${g##*/}
    case "$(cat $port/state 2>/dev/null)" in *ACTIVE*) [ -n "$GID_INDEX" ] && return 0 ;; esac
    sleep 0.1
    i=$((i + 1))
  done
  setup_failed "rxe0 not ACTIVE with an IPv4 GID after 20 s (state: $(cat $port/state 2>/dev/null))"
}

# print_device: what a reader of the log needs to see the device the tests ran on — a few lines, so that a failing
# test's own output comes near the top of the log (CI shows a log's head); all of `ibv_devinfo -v` with --verbose
print_device() {
  echo "===== rdma link"
  rdma link show
  if [ "${ZW_VERBOSE:-0}" = 1 ]; then
    echo "===== ibv_devinfo -v -d rxe0"
    ibv_devinfo -v -d rxe0
  else
    echo "===== ibv_devinfo -d rxe0 (port 1; run.sh --verbose prints all of ibv_devinfo -v)"
    ibv_devinfo -d rxe0 | awk -F':[ \t]*' '/(state|active_mtu|link_layer):/ {gsub(/^[ \t]+/, "", $1); printf "%s%s %s", sep, $1, $2; sep = ", "} END {print ""}'
  fi
  echo "===== GID table of rxe0 port 1 (non-zero entries)"
  port=/sys/class/infiniband/rxe0/ports/1
  grep -v -H '^0000:0000:0000:0000:0000:0000:0000:0000$' "$port"/gids/* | while IFS= read -r line; do
    g=${line%%:*}
    n=${g##*/}
    echo "gid[$n] ${line#*:} type=$(cat $port/gid_attrs/types/"$n") ndev=$(cat $port/gid_attrs/ndevs/"$n")"
  done
}

# export_test_env: harness variables first, then the user's --env values (which may override them)
export_test_env() {
  export ZW_SOFTROCE_DEV=rxe0 ZW_SOFTROCE_GID_INDEX="$GID_INDEX" ZW_SOFTROCE_IP="$MY_IP"
  export ZW_SOFTROCE_RANK="$RANK" ZW_SOFTROCE_NVMS="$ZW_NVMS"
  if [ "$ZW_NVMS" = 2 ]; then
    # shellcheck disable=SC2086
    ZW_SOFTROCE_PEER_IP=$(nth_word $((1 - RANK)) $ZW_IPS)
    export ZW_SOFTROCE_PEER_IP
  fi
  while IFS= read -r kv; do
    # shellcheck disable=SC2163 # exports the variable named inside $kv
    [ -n "$kv" ] && export "$kv"
  done </zw/env
}

# wait_for_peer: --two-vm only; the wire is up once the other guest answers ping
wait_for_peer() {
  i=0
  until ping -c 1 -W 1 "$ZW_SOFTROCE_PEER_IP" >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 120 ] || setup_failed "peer $ZW_SOFTROCE_PEER_IP unreachable after 120 tries"
  done
  echo "zw-softroce: peer $ZW_SOFTROCE_PEER_IP reachable"
}

# barrier N: --two-vm only; both guests start test N together (rank 0 listens, rank 1 connects until it can)
barrier() {
  bport=$((20000 + $1))
  if [ "$RANK" = 0 ]; then
    nc -l -p "$bport" >/dev/null </dev/null
  else
    until echo "$1" | nc "$ZW_SOFTROCE_PEER_IP" "$bport" >/dev/null 2>&1; do sleep 0.2; done
  fi
}

# run_tests: each test in the host's working directory, stdin from /dev/null, result as a marker line
run_tests() {
  cwd=$(cat /zw/cwd)
  mkdir -p "$cwd"
  total=$(find /zw/tests -name '*.cmd' | wc -l)
  for f in /zw/tests/*.cmd; do
    n=$(basename "$f" .cmd)
    n=${n#"${n%%[!0]*}"}
    cmd=$(cat "$f")
    [ "$ZW_NVMS" = 2 ] && barrier "$n"
    echo "===== [$n/$total] $cmd"
    marker "start:$n"
    t0=$(uptime_s)
    (cd "$cwd" && exec sh -c "$cmd") </dev/null
    rc=$?
    took=$(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN { printf "%.1f", b - a }')
    case $rc in 0) verdict=PASSED ;; 77) verdict=SKIPPED ;; *) verdict=FAILED ;; esac
    echo "----- [$n/$total] $verdict (exit $rc, ${took} s)"
    marker "result:$n:$rc:$took"
  done
}

marker "booted:$(uptime_s)"
load_modules
bring_up_net
bring_up_rxe
export_test_env
echo "zw-softroce: vm $RANK ready at uptime $(uptime_s) s: rxe0 on $NETDEV, ip $MY_IP, gid index $GID_INDEX"
print_device
[ "$ZW_NVMS" = 2 ] && wait_for_peer
marker "ready:$(uptime_s)"
run_tests
marker "done:$(uptime_s)"
sync
poweroff -f
