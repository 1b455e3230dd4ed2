#!/bin/sh
# guest.sh — runs inside the Soft-RoCE VM (started by bench/softroce/run.sh, not by hand): perftest and zerowire
# point-to-point runs on the same rxe device, interleaved A B A B, one "RESULT <tool> <test> <run> <value>" line
# per run (bw: BW average in MB/s; lat and sendlat: t_typical in usec, the median; sendlat is ib_send_lat, a
# reference only). Both tools get the same CPU placement:
# the sender / ping initiator (perftest client, zerowire rank 0) on CPU 0, the other side on CPU 1, because two
# busy-polling processes left to the guest scheduler sometimes share one vCPU and then a round trip costs a
# scheduler tick (4 ms), for either tool.
# Usage: guest.sh RUNS BW_SIZE BW_ITERS LAT_SIZE LAT_ITERS ZWRUN ZW_WRITE_BW ZW_WRITE_LAT [CPU_OF_SIDE_1]
# CPU_OF_SIDE_1 (default 1) is the vCPU of the receiving side; 0 puts both sides of either tool on vCPU 0.
# Non-goals: parsing or judging the numbers (run.sh does), running outside the VM.
set -u
runs=$1 bw_size=$2 bw_iters=$3 lat_size=$4 lat_iters=$5 zwrun=$6 zw_bw=$7 zw_lat=$8 cpu1=${9:-1}
dev=${ZW_SOFTROCE_DEV:-rxe0}
gid=${ZW_SOFTROCE_GID_INDEX:-1}
log=/tmp/zw-bench.$$

# perftest TOOL SIZE ITERS COLUMN: server in the background, client on 127.0.0.1 (retried until the server listens);
# prints the COLUMN-th field of the client's result row.
perftest() {
  tool=$1 size=$2 iters=$3 col=$4
  taskset -c "$cpu1" "$tool" -d "$dev" -x "$gid" -F -s "$size" -n "$iters" >"$log.srv" 2>&1 &
  srv=$!
  tries=0
  until taskset -c 0 "$tool" -d "$dev" -x "$gid" -F -s "$size" -n "$iters" 127.0.0.1 >"$log.cli" 2>&1; do
    tries=$((tries + 1))
    if [ $tries -ge 20 ]; then
      echo "perftest $tool client failed:" >&2
      cat "$log.cli" "$log.srv" >&2
      kill $srv 2>/dev/null
      return 1
    fi
    sleep 1
  done
  wait $srv
  awk -v s="$size" -v c="$col" '$1 == s { print $c; exit }' "$log.cli"
}

# zerowire TOOL SIZE ITERS COLUMN: two ranks through zwrun over --transport verbs (ZW_TRANSPORT), rank 0 on vCPU 0,
# rank 1 on CPU_OF_SIDE_1.
zerowire() {
  # shellcheck disable=SC2016 # $ZW_RANK and $0/$@ expand in the rank's shell, not here
  if ! ZW_CPU1=$cpu1 ZW_TRANSPORT=verbs "$zwrun" -n 2 --timeout 300 -- \
      sh -c 'cpu=0; [ "$ZW_RANK" = 1 ] && cpu=$ZW_CPU1; exec taskset -c "$cpu" "$0" "$@"' \
      "$1" -s "$2" -n "$3" >"$log.zw" 2>&1; then
    echo "zerowire $1 failed:" >&2
    cat "$log.zw" >&2
    return 1
  fi
  # zwrun prefixes each line with "[rank] ".
  sed 's/^\[[0-9]*\] //' "$log.zw" | awk -v s="$2" -v c="$4" '$1 == s { print $c; exit }'
}

# check TOOL VALUE: a run that printed no number is a failure (with the log shown).
check() {
  if [ -z "$2" ]; then
    echo "$1 printed no result row:" >&2
    cat "$log".* >&2 2>/dev/null
    status=1
  fi
}

# The guest's clocksource: under TCG the kernel finds the TSC unstable and falls back to hpet, where every
# clock_gettime is a system call plus an emulated HPET read (about 0.9 us, issue 4); perftest times with rdtsc.
echo "CLOCKSOURCE $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"
status=0
i=1
while [ $i -le "$runs" ]; do
  v=$(perftest ib_write_bw "$bw_size" "$bw_iters" 4) || status=1
  check ib_write_bw "$v"
  echo "RESULT perftest bw $i ${v:-nan}"
  v=$(zerowire "$zw_bw" "$bw_size" "$bw_iters" 4) || status=1
  check zw_write_bw "$v"
  echo "RESULT zerowire bw $i ${v:-nan}"
  v=$(perftest ib_write_lat "$lat_size" "$lat_iters" 5) || status=1
  check ib_write_lat "$v"
  echo "RESULT perftest lat $i ${v:-nan}"
  v=$(zerowire "$zw_lat" "$lat_size" "$lat_iters" 5) || status=1
  check zw_write_lat "$v"
  echo "RESULT zerowire lat $i ${v:-nan}"
  # Reference: perftest's two-sided latency (a receive completion per message, as zerowire's notify has).
  v=$(perftest ib_send_lat "$lat_size" "$lat_iters" 5) || status=1
  check ib_send_lat "$v"
  echo "RESULT perftest sendlat $i ${v:-nan}"
  i=$((i + 1))
done
rm -f "$log".*
exit $status
