#!/usr/bin/env python3
"""Monitoring overhead and metrics accuracy, measured with the nccl-tests-style benchmarks.

  bench/monitor/overhead.py BUILD_DIR [--reps 7] [--ranks 2 4] [--colls all_gather all_reduce] [-b 4K -e 64M]

For every repetition, collective and rank count it runs the benchmark with ZW_MONITOR=0 and =1, interleaved (the
order alternates between repetitions so that drift in the machine's load hits both alike), and prints, per size,
the median time of each and the overhead (on/off - 1). The runs with monitoring on also dump their metrics
(ZW_METRICS_DUMP); the metrics' bus bandwidth of the size's bucket is printed beside the benchmark's own for the
same runs. The benchmark times in-place and out-of-place operations and the metrics aggregate both (and the
warm-up), so the benchmark's figure compared is bytes over the mean of its two times.
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
           "-f", "4", "-n", str(args.iters), "-w", str(args.warmup)]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--colls", nargs="+", default=["all_gather", "all_reduce"])
    ap.add_argument("-b", default="4K")
    ap.add_argument("-e", default="64M")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    for coll in args.colls:
        for n in args.ranks:
            times = {0: {}, 1: {}}
            ratio = {}
            for rep in range(args.reps):
                for monitor in ((0, 1) if rep % 2 == 0 else (1, 0)):
                    with tempfile.TemporaryDirectory() as d:
                        rows, metrics = run(args.build, coll, n, monitor, args, d if monitor else None)
                    for size, r in rows.items():
                        times[monitor].setdefault(size, []).append((r["t_oop"] + r["t_ip"]) / 2)
                        if monitor and size in metrics:
                            factor = r["busbw_oop"] / (size / r["t_oop"] / 1e3) if r["t_oop"] else 0
                            bench = size / ((r["t_oop"] + r["t_ip"]) / 2) / 1e3 * factor
                            ratio.setdefault(size, []).append((metrics[size], bench))
            print(f"\n{coll}, {n} ranks, shm, {args.reps} interleaved repetitions, medians "
                  f"(time = mean of out-of-place and in-place, us)")
            print("| size | time off (us) | time on (us) | overhead | busbw bench (GB/s) | busbw metrics (GB/s) | metrics/bench |")
            print("|---:|---:|---:|---:|---:|---:|---:|")
            for size in sorted(times[0]):
                off, on = statistics.median(times[0][size]), statistics.median(times[1][size])
                m = statistics.median(x for x, _ in ratio.get(size, [(0, 0)]))
                b = statistics.median(y for _, y in ratio.get(size, [(0, 0)]))
                print(f"| {size} | {off:.2f} | {on:.2f} | {100 * (on / off - 1):+.1f} % | {b:.2f} | {m:.2f} | "
                      f"{m / b if b else 0:.3f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
