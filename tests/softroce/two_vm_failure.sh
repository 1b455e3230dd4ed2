#!/bin/sh
# two_vm_failure.sh RANK_PROBE [kill|unplug] — runs on both guests of `tools/softroce-vm/run.sh --two-vm`
# (tests/softroce/CMakeLists.txt): four zw_rank_probe processes over --transport verbs across the two VMs (ranks 0-1
# on VM 0, which also serves the store, ranks 2-3 on VM 1), all-reducing until
#   kill:   rank 2 SIGKILLs itself after 3 iterations. Every surviving rank, on either host, must exit 3 with an
#           error naming rank 2: the liveness connection's FIN/RST crosses the wire like any TCP segment.
#   unplug: VM 1 takes its link down after a few seconds, so nothing (no FIN, no RST) reaches VM 0. Ranks 0-1
#           must exit 3 with an error naming rank 2 or 3, through TCP keep-alive on the liveness connections.
# In both cases well before ZW_TIMEOUT (60 s) and the QPs, which Soft-RoCE retries forever.
# Non-goals: more ranks, other transports (tests/collectives/failure_test.cc covers shm and tcp on one host).
set -u
probe=$1
mode=${2:-kill}
vm=${ZW_SOFTROCE_RANK:?run me through tools/softroce-vm/run.sh --two-vm}
if [ "$vm" = 0 ]; then store_ip=$ZW_SOFTROCE_IP; else store_ip=$ZW_SOFTROCE_PEER_IP; fi
export ZW_STORE_ADDR="$store_ip:29611" ZW_AUTH_TOKEN=two-vm-failure ZW_TRANSPORT=verbs ZW_TIMEOUT=60 ZW_WORLD_SIZE=4
export ZW_LOCAL_WORLD_SIZE=2
args="1000000 2 3"
victims='rank 2([^0-9]|$)'  # also at the end of an abort reason cut to one control message
if [ "$mode" = unplug ]; then
  args=1000000
  victims='rank [23]([^0-9]|$)'
fi
dir=/tmp/two-vm-failure
mkdir -p $dir
pids=""
for idx in 0 1; do
  rank=$((vm * 2 + idx))
  # shellcheck disable=SC2086 # $args is a word list
  ZW_RANK=$rank ZW_LOCAL_RANK=$idx "$probe" $args 2>"$dir/rank$rank.log" &
  pids="$pids $!"
  [ "$rank" = 0 ] && sleep 1  # rank 0 serves the store; let it bind first
done
start=$(date +%s)
if [ "$mode" = unplug ] && [ "$vm" = 1 ]; then
  sleep 8  # the job is up and all-reducing
  ip link set eth0 down
  echo "VM 1: link down at $(($(date +%s) - start)) s"
fi
fail=0
idx=0
for pid in $pids; do
  rank=$((vm * 2 + idx))
  idx=$((idx + 1))
  wait "$pid"
  rc=$?
  log=$dir/rank$rank.log
  if [ "$mode" = kill ] && [ "$rank" = 2 ]; then
    [ $rc = 137 ] || { echo "rank 2 should have been killed by SIGKILL, exit $rc"; fail=1; }
  elif [ "$mode" = unplug ] && [ "$vm" = 1 ]; then
    echo "rank $rank (cut off) exited $rc: $(grep -m1 -E 'iteration|setup' "$log")"
  elif [ $rc != 3 ]; then
    echo "rank $rank exited $rc, expected 3 (an operation failed):"; cat "$log"; fail=1
  elif ! grep -Eq "$victims" "$log"; then
    echo "rank $rank's error does not name the lost rank ($victims):"; cat "$log"; fail=1
  elif grep -q "timed out after" "$log"; then  # ZW_TIMEOUT's message
    echo "rank $rank waited for ZW_TIMEOUT:"; cat "$log"; fail=1
  else
    echo "rank $rank: $(grep -m1 'iteration' "$log")"
  fi
done
echo "VM $vm ($mode): ranks done after $(($(date +%s) - start)) s (ZW_TIMEOUT is 60 s)"
exit $fail
