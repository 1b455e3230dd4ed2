#!/bin/sh
# zw_info_check.sh ZW_INFO — runs inside the Soft-RoCE VM (tests/softroce/CMakeLists.txt): zw_info must list the
# rxe device, its active port with link layer, MTU and speed, the GID table with the selected RoCE v2 IPv4-mapped
# entry, and a GPUDirect RDMA line (on this VM, with no GPU driver: "none: ...").
# Non-goals: checking the exact speed or GID values, which depend on the VM's NIC.
set -u
out=$("$1" 2>/dev/null) || { echo "zw_info failed"; exit 1; }
echo "$out"
fail=0
expect() {
  if ! printf '%s\n' "$out" | grep -Eq "$1"; then
    echo "MISSING in zw_info output: $2"
    fail=1
  fi
}
dev=${ZW_SOFTROCE_DEV:-rxe0}
gid=${ZW_SOFTROCE_GID_INDEX:-1}
expect "^  $dev \\(1 port" "the device $dev"
expect "^    port 1: active, link layer Ethernet \\(RoCE\\), mtu [0-9]+ \\(max [0-9]+\\), .*Gb/s" "port 1 state, link layer, MTU, speed"
expect "^      gid $gid: RoCE v2 ::ffff:[0-9.]+   <- selected$" "gid $gid (RoCE v2, IPv4-mapped) marked selected"
expect "^      gid [0-9]+: RoCE v2 fe80:" "the link-local GID entry"
expect "^  GPUDirect RDMA: (none|staging|peermem|dmabuf): " "the GPUDirect RDMA mode"
[ $fail = 0 ] && echo "zw_info check passed"
exit $fail
