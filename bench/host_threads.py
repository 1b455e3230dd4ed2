#!/usr/bin/env python3
"""ZW_HOST_THREADS on a host with more cores than ranks: the same host collectives with 1, 2 and 4 threads per rank.

    python3 bench/host_threads.py BUILD [--threads 1 2 4] [--worlds 2 4] [--rounds 3] [-b 1M -e 64M]

For every collective (all_gather, reduce_scatter, all_reduce: zw_*_perf over shm, float sum, the buffers as the
benchmarks allocate them, so the shm transport writes into peers with process_vm_writev, and reduce-scatter chunks
land in mapped scratch slots) and world size, `rounds` rounds each run one launch per thread count, the order
rotating from round to round; a launch covers every size. The table shows, per size, each thread count's median
out-of-place time over the rounds with the spread, and the ratio time(1) / time(T): above 1, the helpers pay.
Nothing is asserted (CI never runs this): it is the measurement behind ZW_HOST_THREADS' default and the helper pool's
part sizes (src/common/helper_pool.h; docs/PERF.md "Helper threads for host copies and reductions").
Non-goals: device memory, tcp (its copies are the kernel's).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROW = re.compile(r"^\[0\]\s+(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s")


def launch(build, coll, world, threads, lo, hi, timeout):
    env = dict(os.environ, ZW_HOST_THREADS=str(threads), ZW_TRANSPORT="shm")
    cmd = [os.path.join(build, "tools", "zwrun"), "-n", str(world), "--",
           os.path.join(build, "bench", f"zw_{coll}_perf"), "-b", lo, "-e", hi, "-f", "4", "-n", "10", "-w", "2"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"host_threads: {' '.join(cmd)} (ZW_HOST_THREADS={threads}) failed:\n{out.stdout}\n{out.stderr}")
    times = {}
    for line in out.stdout.splitlines():
        m = ROW.match(line)
        if m:
            times[int(m.group(1))] = float(m.group(2))
    if "Out of bounds values : 0 OK" not in out.stdout:
        sys.exit(f"host_threads: wrong results with ZW_HOST_THREADS={threads}:\n{out.stdout}")
    return times


def size_name(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    p.add_argument("--colls", nargs="+", default=["all_gather", "reduce_scatter", "all_reduce"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-b", default="1M")
    p.add_argument("-e", default="64M")
    p.add_argument("--timeout", type=int, default=120, help="seconds per launch")
    a = p.parse_args()
    print(f"# host_threads: {os.cpu_count()} CPUs, threads {a.threads}, worlds {a.worlds}, {a.rounds} rounds, "
          f"{a.b}-{a.e}; out-of-place µs, median [min-max]; ratio = time(1)/time(T)")
    for coll in a.colls:
        for world in a.worlds:
            runs = {t: [] for t in a.threads}
            for r in range(a.rounds):
                order = a.threads[r % len(a.threads):] + a.threads[:r % len(a.threads)]
                for t in order:
                    runs[t].append(launch(a.build, coll, world, t, a.b, a.e, a.timeout))
            for size in sorted(runs[a.threads[0]][0]):
                cells, base = [], None
                for t in a.threads:
                    ts = [run[size] for run in runs[t] if size in run]
                    med = statistics.median(ts)
                    base = med if base is None else base
                    ratio = f" x{base / med:.2f}" if t != a.threads[0] else ""
                    cells.append(f"T={t} {med:9.1f} [{min(ts):.1f}-{max(ts):.1f}]{ratio}")
                print(f"{coll:14s} n={world} {size_name(size):>4s}  " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
