#!/usr/bin/env python3
"""bench/compare/report.py: turns the raw logs of bench/compare/run.sh into one table.

Reads RESULTS/manifest.tsv (one line per benchmark process: kind, key, n|size, impl, rep, exit code, log),
RESULTS/unavailable.tsv (anchors that could not be installed, built or found) and RESULTS/meta.tsv, parses the
nccl-tests tables (zw_*_perf, mpi_coll_bench, gloo_coll_bench), the perftest tables (zw_write_bw/lat), the
"Final:" lines of ucx_perftest and mem_limits' lines, prints a markdown section and appends it to --out.

Cells are median [min-max] over the repetitions; ratios divide medians and are > 1 when zerowire is faster.
Non-goals: plots, statistics beyond median/min/max, judging the numbers. Standard library only.
"""
import argparse
import os
import platform
import re
import statistics
import sys
from collections import defaultdict

PAIRS = {  # pair -> (zerowire impl, anchor impl, label)
    "shm-ompi": ("zw-shm", "ompi-vader", "shm vs Open MPI ob1/vader"),
    "shmreg-ompi": ("zw-shmreg", "ompi-vader", "shm, zw::mem_alloc buffers vs Open MPI ob1/vader"),
    "tcp-ompi": ("zw-tcp", "ompi-tcp", "tcp vs Open MPI ob1/tcp (lo)"),
    "tcp-gloo": ("zw-tcp", "gloo-tcp", "tcp vs Gloo tcp (127.0.0.1)"),
}
ANCHOR_GROUP = {"ompi-vader": "ompi", "ompi-tcp": "ompi", "gloo-tcp": "gloo", "ucx-posix": "ucx", "ucx-sysv": "ucx"}
RANK_PREFIX = re.compile(r"^\[\d+\]\s?")


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def log_lines(path):
    try:
        with open(path, errors="replace") as f:
            return [RANK_PREFIX.sub("", line.rstrip("\n")) for line in f]
    except OSError:
        return []


def number(tok):
    try:
        return float(tok)
    except ValueError:
        return None  # "N/A"


def parse_nccl_table(lines, n):
    """size -> {"oop": (busbw, wrong), "ip": (busbw, wrong)}; a placement printed as N/A is left out.

    busbw is recomputed from the time column (size / time * (n-1)/n, as nccl-tests), which keeps the precision
    that the printed two-decimal busbw loses at small sizes."""
    rows = {}
    for line in lines:
        tok = line.split()
        if len(tok) != 13 or line.lstrip().startswith("#") or not tok[0].isdigit():
            continue
        row = {}
        for name, time, wrong in (("oop", 5, 8), ("ip", 9, 12)):
            us = number(tok[time])
            if us is not None and us > 0:
                row[name] = (int(tok[0]) / (us * 1e3) * (n - 1) / n, tok[wrong] not in ("0", "N/A"))
        rows[int(tok[0])] = row
    return rows


def parse_p2p(impl, test, lines):
    """GB/s for bandwidth, microseconds (median, half round trip) for latency; None when absent."""
    for line in lines:
        tok = line.split()
        if impl.startswith("ucx") and tok[:1] == ["Final:"] and len(tok) >= 9:
            # Final: iters  lat-50%ile lat-avg lat-overall  bw-avg bw-overall (MB/s = 2^20 B/s)  rate-avg rate-overall
            return float(tok[2]) if test == "lat" else float(tok[6]) * 1048576 / 1e9
        if impl.startswith("zw") and tok and tok[0].isdigit():
            if test == "bw" and len(tok) == 5:
                return float(tok[3]) / 8  # BW average [Gb/sec] -> GB/s
            if test == "lat" and len(tok) == 9:
                return float(tok[4])  # t_typical (median)
    return None


def failure_reason(rc, lines, meta):
    if rc in ("124", "137"):
        return "timed out after %s s" % meta.get("timeout", "?")
    if "---- server ----" in lines:  # ucx_pair: the client's own words come before the server's log
        client = lines[:lines.index("---- server ----")]
        lines = client if any(l.strip() for l in client) else lines
    text = [l.strip() for l in lines if l.strip() and not l.startswith(("#", "----"))]
    last = text[-1] if text else "no output"
    return "exit %s: %s" % (rc, last[:110])


def fmt(v):
    """Three significant digits."""
    if v is None:
        return "-"
    return "%.0f" % v if v >= 100 else "%.3g" % v if v >= 0.001 else "%.1e" % v


def cell(values):
    if not values:
        return None
    if len(values) == 1:
        return fmt(values[0])
    return "%s [%s–%s]" % (fmt(statistics.median(values)), fmt(min(values)), fmt(max(values)))


def human_size(b):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return "%d %s" % (b // scale, unit)
    return "%d B" % b


# mem_limits' probes (name, sentence with the GB/s cell), in the order they are printed.
LIMIT_TEXT = [
    ("memcpy", "memcpy, one thread, 256 MiB: %s GB/s copied (twice that in memory traffic)"),
    ("a+=b", "a += b (float32), one thread, 256 MiB: %s GB/s of a (three times that in memory traffic)"),
    ("memcpy-2threads", "memcpy, two threads at once, 256 MiB each: %s GB/s per thread (what each rank of a 2-rank "
                        "all-gather can copy while the other copies too)"),
    ("cma", "process_vm_readv from another process, one call of 256 MiB: %s GB/s (the one copy of shm all-gathers "
            "at sizes beyond the caches, both zerowire's and Open MPI's)"),
    ("memcpy-cached", "memcpy of a reused 512 KiB block (cache-resident, as a 1 MiB all-gather's blocks): %s GB/s"),
    ("cma-cached", "process_vm_readv of the same reused 512 KiB block from another process: %s GB/s"),
    ("memcpy-cached-2M", "memcpy of a reused 2 MiB block (as a 4 MiB all-gather's blocks): %s GB/s"),
    ("cma-cached-2M", "process_vm_readv of the same reused 2 MiB block from another process: %s GB/s"),
    ("tcp-lo", "one TCP stream over 127.0.0.1, one way, 4 MiB socket buffers: %s GB/s"),
    ("tcp-lo-2way", "two TCP streams over 127.0.0.1 in opposite directions at once, one polling thread per "
                    "process, 256 MiB each way from and into 64 MiB buffers: %s GB/s per direction (a 2-rank tcp "
                    "all-gather of 64 MiB and more moves the same traffic)"),
    ("tcp-lo-2way-cached", "the same with 2 MiB each way from and into 2 MiB buffers (what a 4 MiB 2-rank tcp "
                           "all-gather moves): %s GB/s per direction"),
]


class Results:
    def __init__(self, results_dir):
        self.meta = dict((r[0], r[1]) for r in read_tsv(os.path.join(results_dir, "meta.tsv")) if len(r) == 2)
        self.unavailable = dict((r[0], r[1]) for r in read_tsv(os.path.join(results_dir, "unavailable.tsv")))
        self.coll = defaultdict(list)  # (coll, n, impl) -> [rows per successful parse]
        self.p2p = defaultdict(list)  # (test, size, impl) -> [values]
        self.limits = defaultdict(list)  # name -> [GB/s]
        self.failures = defaultdict(list)  # (kind, key, n, impl) -> [reasons]
        for kind, key, n, impl, _rep, rc, path in read_tsv(os.path.join(results_dir, "manifest.tsv")):
            lines = log_lines(path)
            if rc != "0":
                self.failures[(kind, key, n, impl)].append(failure_reason(rc, lines, self.meta))
            if kind == "coll":
                rows = parse_nccl_table(lines, int(n))
                if rows:
                    self.coll[(key, int(n), impl)].append(rows)
            elif kind == "p2p":
                v = parse_p2p(impl, key, lines)
                if v is not None:
                    self.p2p[(key, int(n), impl)].append(v)
            elif kind == "limits":
                for line in lines:
                    tok = line.split()
                    if len(tok) == 4 and tok[0] == "limit":
                        self.limits[tok[1]].append(float(tok[3]))

    def why_missing(self, kind, key, n, impl):
        group = ANCHOR_GROUP.get(impl)
        if group in self.unavailable:
            return "n/a (%s)" % self.unavailable[group]
        reasons = self.failures.get((kind, key, str(n), impl))
        if reasons:
            return "n/a (%s)" % reasons[-1]
        return "n/a (no data)"


def placements_of(res, coll, n, zw, anchor):
    """The placements both sides measured, out-of-place first; with no data, the one the anchor has (Gloo's
    reduce-scatter is in place only)."""
    def have(impl):
        return {p for rows in res.coll.get((coll, n, impl), []) for row in rows.values() for p in row}
    both = have(zw) & have(anchor)
    found = [p for p in ("oop", "ip") if p in both]
    return found or ["ip" if (anchor, coll) == ("gloo-tcp", "reduce_scatter") else "oop"]


def samples(res, coll, n, impl, size, placement):
    values, wrong = [], 0
    for rows in res.coll.get((coll, n, impl), []):
        got = rows.get(size, {}).get(placement)
        if got:
            values.append(got[0])
            wrong += got[1]
    return values, wrong


def coll_table(res, pairs):
    out = ["| collective | n | pair | placement | size | zerowire busbw | anchor busbw | zw/anchor |",
           "|---|---:|---|---|---:|---:|---:|---:|"]
    keys = sorted({(c, n) for (c, n, _impl) in res.coll} | {(k, int(n)) for (kind, k, n, _i) in res.failures
                                                             if kind == "coll"})
    for coll, n in keys:
        for pair in pairs:
            zw, anchor, label = PAIRS[pair]
            sizes = sorted({s for impl in (zw, anchor) for rows in res.coll.get((coll, n, impl), []) for s in rows})
            for place, size in [(p, s) for p in placements_of(res, coll, n, zw, anchor) for s in sizes or [None]]:
                row = []
                meds = []
                for impl in (zw, anchor):
                    values, wrong = samples(res, coll, n, impl, size, place) if size else ([], 0)
                    text = cell(values) or res.why_missing("coll", coll, n, impl)
                    if wrong:
                        text += " WRONG in %d run(s)" % wrong
                    row.append(text)
                    meds.append(statistics.median(values) if values and not wrong else None)
                ratio = "%.2f" % (meds[0] / meds[1]) if meds[0] and meds[1] else "–"
                out.append("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
                    coll, n, label, "out-of-place" if place == "oop" else "in-place",
                    human_size(size) if size else "all", row[0], row[1], ratio))
    return out


def p2p_table(res):
    out = ["| test | size | zerowire shm | UCX posix,self | ratio | UCX sysv,self | ratio |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    keys = sorted({(t, s) for (t, s, _impl) in res.p2p} | {(k, int(s)) for (kind, k, s, _i) in res.failures
                                                           if kind == "p2p"}, key=lambda k: (k[0] != "bw", k[1]))
    for test, size in keys:
        zw = res.p2p.get((test, size, "zw-shm"), [])
        row = ["%s (%s)" % ("bandwidth" if test == "bw" else "latency", "GB/s" if test == "bw" else "µs, median"),
               human_size(size), cell(zw) or res.why_missing("p2p", test, size, "zw-shm")]
        for impl in ("ucx-posix", "ucx-sysv"):
            vals = res.p2p.get((test, size, impl), [])
            row.append(cell(vals) or res.why_missing("p2p", test, size, impl))
            if zw and vals:
                a, b = statistics.median(zw), statistics.median(vals)
                row.append("%.2f" % ((a / b) if test == "bw" else (b / a)))
            else:
                row.append("–")
        out.append("| " + " | ".join(row) + " |")
    return out


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), model)
    except OSError:
        pass
    return "nproc %d, CPU %s, Linux %s" % (len(os.sched_getaffinity(0)), model, platform.release())


def section(res, pairs):
    m = res.meta
    quick = m.get("quick") == "1"
    lines = ["## zerowire vs Open MPI, Gloo and UCX, side by side — %s%s" % (
        m.get("date", "?"), " (--quick smoke run, not for conclusions)" if quick else ""), ""]
    lines += ["- machine: %s" % machine(),
              "- command: `%s`" % m.get("command", "?"),
              "- zerowire %s; Open MPI %s, Gloo %s, UCX %s (Debian packages)" % (
                  m.get("zerowire", "?"), m.get("pkg openmpi-bin", "?"), m.get("pkg libgloo-dev", "?"),
                  m.get("pkg ucx-utils", "?")),
              "- method: %s repetition(s), interleaved zerowire / anchor; collectives %s, float32 sum, validated "
              "once per size before timing; cells are median [min–max] over repetitions; ratios divide medians "
              "(> 1: zerowire faster)" % (m.get("reps", "?"), m.get("sizes", "?")), ""]
    if any(k[0] == "coll" for k in res.failures) or res.coll:
        lines += ["### Collectives: bus bandwidth (GB/s, nccl-tests busbw)", ""] + coll_table(res, pairs) + [""]
    if res.p2p or any(k[0] == "p2p" for k in res.failures):
        lines += ["### Point-to-point over shared memory, 2 processes (zw_write_bw/lat vs ucx_perftest tag_bw/lat)",
                  "", "Latency is half a round trip; its ratio is UCX / zerowire (> 1: zerowire faster).", ""]
        lines += p2p_table(res) + [""]
    if res.limits:
        lines += ["### This machine's limits (best of 7 per run; median [min–max] over runs)", ""]
        for name, text in LIMIT_TEXT:
            if name in res.limits:
                lines.append("- " + text % cell(res.limits[name]))
        lines.append("")
    for group, reason in sorted(res.unavailable.items()):
        lines.append("- %s unavailable: %s" % (group, reason))
    return "\n".join(lines).rstrip("\n") + "\n"


def append(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fresh = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a") as f:
        if fresh:
            f.write("# Side-by-side measurements (bench/compare/run.sh)\n\n"
                    "Each run of bench/compare/run.sh appends one section; nothing here is ever rewritten.\n\n")
        else:
            f.write("\n")
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True, help="directory written by run.sh")
    ap.add_argument("--out", help="markdown file to append the section to (omit: stdout only)")
    ap.add_argument("--pairs", default=" ".join(PAIRS), help="comparisons to show, as run.sh --pairs")
    args = ap.parse_args()
    pairs = [p for p in args.pairs.split() if p in PAIRS]
    res = Results(args.results)
    text = section(res, pairs)
    sys.stdout.write(text)
    if args.out:
        append(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
