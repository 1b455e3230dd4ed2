#!/usr/bin/env python3
"""Monitoring overhead and metrics accuracy, measured with the nccl-tests-style benchmarks.

  bench/monitor/overhead.py BUILD_DIR [--reps 9] [--ranks 2 4] [--colls all_gather all_reduce] [-b 4K -e 256K]
                            [--iters 500] [--warmup 0]

For every repetition, collective and rank count it runs the benchmark with ZW_MONITOR=0 and =1 back to back (the
order alternates between repetitions, so that drift in the machine's load hits both alike) and pairs the two runs:
per size, the overhead of a repetition is on/off - 1 of that pair. The table gives the median of the paired overheads
with their quartiles (the spread says how far the machine's noise reaches: an overhead inside it is not measured),
and the median times. The runs with monitoring on also dump their metrics (ZW_METRICS_DUMP); the metrics' bus
bandwidth of the size's bucket over the benchmark's own for the same run is summarised the same way.

What the two figures cover: the benchmark times `iters` operations issued back to back and divides the wall time by
`iters`; the metrics divide the bytes of every operation of the size's bucket by the sum of their service times (from
the issue, or the end of the operation ahead if that came later, to the end on the rank). Validation (-c 1) and warm-up operations are waited for one at a time, so their run times include
the wait for the peer that arrives later (tens of µs between processes) and first-use costs, which the benchmark's
timed loop does not see: at 4-64 KiB 12 such operations weigh as much as 400 timed ones. So these runs use -c 0 and
--warmup 0 by default: the metrics then aggregate exactly the benchmark's timed operations (in and out of place; the
benchmark's figure is bytes over the mean of its two times).
Non-goals: asserting anything (a benchmark, not a test).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(build, coll, n, monitor, args, dump_dir):
    env = dict(os.environ, ZW_MONITOR=str(monitor), ZW_STRAGGLER_WINDOW="0")
    if dump_dir:
        env["ZW_METRICS_DUMP"] = os.path.join(dump_dir, "rank%r.json")
    cmd = [f"{build}/tools/zwrun", "-n", str(n), "--", f"{build}/bench/zw_{coll}_perf", "-b", args.b, "-e", args.e,
           "-f", "4", "-n", str(args.iters), "-w", str(args.warmup), "-c", "0"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 14 and f[0] == "[0]" and f[1].isdigit():
            # size count type redop root time algbw busbw wrong time algbw busbw wrong
            rows[int(f[1])] = dict(t_oop=float(f[6]), t_ip=float(f[10]), busbw_oop=float(f[8]), busbw_ip=float(f[12]))
    metrics = {}
    if dump_dir:
        with open(os.path.join(dump_dir, "rank0.json")) as fh:
            for s in json.load(fh)["communicators"][0]["stats"]:
                if s["op"] == coll:
                    metrics[s["size_le_bytes"]] = s["busbw_Bps"] / 1e9
    return rows, metrics


def quartiles(xs):
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def measure(args, coll, n):
    """Per size: paired on/off ratios, times off and on, and metrics/bench ratios (one of each per repetition)."""
    pairs, off, on, acc = {}, {}, {}, {}
    for rep in range(args.reps):
        got = {}
        for monitor in ((0, 1) if rep % 2 == 0 else (1, 0)):
            with tempfile.TemporaryDirectory() as d:
                got[monitor] = run(args.build, coll, n, monitor, args, d if monitor else None)
        for size, r0 in got[0][0].items():
            r1 = got[1][0].get(size)
            if not r1:
                continue
            t0, t1 = (r0["t_oop"] + r0["t_ip"]) / 2, (r1["t_oop"] + r1["t_ip"]) / 2
            off.setdefault(size, []).append(t0)
            on.setdefault(size, []).append(t1)
            pairs.setdefault(size, []).append(t1 / t0 - 1)
            m = got[1][1].get(size)
            if m and r1["t_oop"]:
                factor = r1["busbw_oop"] / (size / r1["t_oop"] / 1e3)
                acc.setdefault(size, []).append(m / (size / t1 / 1e3 * factor))
    return pairs, off, on, acc


def main():
    ap = argparse.ArgumentParser(description="monitoring on/off through the collectives benchmarks (see the doc)")
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--colls", nargs="+", default=["all_gather", "all_reduce"])
    ap.add_argument("-b", default="4K")
    ap.add_argument("-e", default="256K")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=0)
    args = ap.parse_args()
    for coll in args.colls:
        for n in args.ranks:
            pairs, off, on, acc = measure(args, coll, n)
            print(f"\n{coll}, {n} ranks, shm, {args.reps} paired repetitions (on/off back to back, order alternating), "
                  f"-n {args.iters} -w {args.warmup} -c 0; time = mean of out-of-place and in-place, us")
            print("| size | time off (us) | time on (us) | overhead: median [quartiles] | metrics/bench busbw: median "
                  "[quartiles] |")
            print("|---:|---:|---:|---:|---:|")
            for size in sorted(pairs):
                p, a = pairs[size], acc.get(size, [0.0])
                pq, aq = quartiles(p), quartiles(a)
                print(f"| {size} | {statistics.median(off[size]):.2f} | {statistics.median(on[size]):.2f} | "
                      f"{100 * statistics.median(p):+.1f} % [{100 * pq[0]:+.1f}, {100 * pq[1]:+.1f}] | "
                      f"{statistics.median(a):.3f} [{aq[0]:.3f}, {aq[1]:.3f}] |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
