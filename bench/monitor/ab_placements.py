#!/usr/bin/env python3
"""zw_monitor_ab across builds and code placements: what a change to the monitored path does, apart from where its
code lands.

  bench/monitor/ab_placements.py [--src NAME=DIR ...] [--placements default f64 ...] [--launches 40] [--ranks 2]
                                 [-c all_gather] [-b 4K] [-r 41] [--work DIR] [--jobs N] [--deadline SECONDS]

On the dev VM the 2-rank 4 KiB figure of one source moves by ~2.5 points with the placement of its code alone
(docs/PERF.md, twenty-eighth session), more than the changes it was used to compare: a change measured with one build
per side measures where its code landed. This builds every source tree (--src, default: this checkout) at every
placement (host-only, the two targets), then runs one launch of `zwrun -n RANKS -- zw_monitor_ab` per arm — every
build monitored, and every build with --control — in rotating order, and prints per build the median of the
launches' overheads with a bootstrap 95 % interval, its control's and their difference, and per source the median
over its placements. The raw lines go to WORK/ab.log as they come, so a run stopped at --deadline still says what it
measured.

Placements: default (the compiler's), f32 / f64 (-falign-functions=32 / 64), l64 (-falign-loops=64), or NAME=FLAGS.
Non-goals: asserting anything (a benchmark), choosing a placement for the release build.
"""
import argparse
import concurrent.futures
import os
import random
import re
import statistics
import subprocess
import sys
import time

PLACEMENTS = {"default": "", "f32": "-falign-functions=32", "f64": "-falign-functions=64", "l64": "-falign-loops=64"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OVERHEAD = re.compile(r"overhead median ([-+\d.]+) %")


def build(src, flags, out, jobs):
    cmake = ["cmake", "-S", src, "-B", out, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DZW_BUILD_TESTS=OFF",
             "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON", "-DCMAKE_CXX_FLAGS=" + flags]
    for cmd in (cmake, ["cmake", "--build", out, "-j", str(jobs), "--target", "zw_monitor_ab", "zwrun"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


def launch(bdir, args, control):
    cmd = [os.path.join(bdir, "tools", "zwrun"), "-n", str(args.ranks), "--",
           os.path.join(bdir, "bench", "monitor", "zw_monitor_ab"), "-c", args.coll, "-b", args.bytes, "-r",
           str(args.rounds)] + (["--control"] if control else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    m = OVERHEAD.search(r.stdout + r.stderr)
    return float(m.group(1)) if m else None


def median_ci(v):
    boot = sorted(statistics.median(random.choices(v, k=len(v))) for _ in range(2000))
    return statistics.median(v), boot[50], boot[1949]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", nargs="+", default=["this=" + ROOT], help="NAME=DIR source trees (default: this checkout)")
    ap.add_argument("--placements", nargs="+", default=["default", "f32", "f64"])
    ap.add_argument("--launches", type=int, default=40)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("-c", "--coll", default="all_gather")
    ap.add_argument("-b", "--bytes", default="4K")
    ap.add_argument("-r", "--rounds", type=int, default=41)
    ap.add_argument("--work", default="/tmp/zw_ab_placements")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--deadline", type=float, default=0, help="stop launching after this many seconds (0: none)")
    args = ap.parse_args()
    start = time.monotonic()
    os.makedirs(args.work, exist_ok=True)
    builds, jobs = [], []  # (source name, placement name, build dir); what build() gets for each
    for spec in args.src:
        name, _, src = spec.partition("=")
        if not src or not os.path.isfile(os.path.join(src, "CMakeLists.txt")):
            sys.exit(f"--src {spec}: expected NAME=DIR with DIR a zerowire source tree")
        for p in args.placements:
            pname, _, flags = p.partition("=")
            if not flags:
                if pname not in PLACEMENTS:
                    sys.exit(f"placement {p}: not one of {', '.join(PLACEMENTS)} nor NAME=FLAGS")
                flags = PLACEMENTS[pname]
            out = os.path.join(args.work, f"b-{name}-{pname}")
            jobs.append((os.path.abspath(src), flags, out))
            builds.append((name, pname, out))
    # The builds side by side, the cores shared between them: a build alone leaves most cores idle in its links.
    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        list(pool.map(lambda j: build(*j, max(1, args.jobs // len(jobs))), jobs))
    print(f"built {len(jobs)} trees ({', '.join(f'{b[0]} at {b[1]}' for b in builds)}) in "
          f"{time.monotonic() - t:.0f} s", flush=True)
    arms = [(b, c) for b in builds for c in (False, True)]
    results = {arm: [] for arm in arms}
    with open(os.path.join(args.work, "ab.log"), "w") as log:
        for i in range(args.launches):
            if args.deadline and time.monotonic() - start > args.deadline:
                print(f"deadline reached after {i} launches per arm", flush=True)
                break
            k = i % len(arms)
            for arm in arms[k:] + arms[:k]:
                (name, pname, out), control = arm
                v = launch(out, args, control)
                log.write(f"{name} {pname} {'control' if control else 'on'} {v}\n")
                log.flush()
                if v is not None:
                    results[arm].append(v)
    print(f"\n{args.coll} {args.bytes}, {args.ranks} ranks, {args.rounds} rounds a launch; median over launches "
          f"[bootstrap 95 %]")
    print(f"{'source':<12} {'placement':<10} {'launches':>8}  {'monitored':>24}  {'control':>24}  {'difference':>10}")
    per_source = {}
    for b in builds:
        on, ctl = results[(b, False)], results[(b, True)]
        if len(on) < 3 or len(ctl) < 3:
            print(f"{b[0]:<12} {b[1]:<10} {len(on):>8}  (too few launches)")
            continue
        mo, lo, hi = median_ci(on)
        mc, clo, chi = median_ci(ctl)
        print(f"{b[0]:<12} {b[1]:<10} {len(on):>8}  {mo:+6.2f} % [{lo:+.2f}, {hi:+.2f}]  "
              f"{mc:+6.2f} % [{clo:+.2f}, {chi:+.2f}]  {mo - mc:+9.2f}")
        per_source.setdefault(b[0], []).append((mo, mo - mc))
    # The controls scatter too (both communicators unmonitored): the monitored figures themselves are the steadier.
    for name, rows in per_source.items():
        on, diff = [r[0] for r in rows], [r[1] for r in rows]
        print(f"{name} over {len(rows)} placements: monitored median {statistics.median(on):+.2f} % "
              f"(range {min(on):+.2f} to {max(on):+.2f}); less its control {statistics.median(diff):+.2f} "
              f"(range {min(diff):+.2f} to {max(diff):+.2f})")


if __name__ == "__main__":
    main()
