#!/usr/bin/env python3
"""tools/gpu_check_summary.py LOG_DIR — the summary that tools/gpu-check.sh prints last, from what its stages wrote.

Stage times and status; the GPU tests (failed or cut first, then the skips: those for lack of GPUs, "needs N GPUs",
apart from the rest); the collectives tests' time per world and any stall they reported; memcheck; the multi-process
runs; then the benchmark tables: CUDA reduce kernels, offloaded optimizer, training comparison, zerowire vs NCCL
(busbw GB/s, medians; zw/nccl = ratio of medians; peer = cudaMemcpyPeerAsync push reference) and the ring kernels.
Exit status 1 when a stage or test did not pass (skips pass). Non-goals: history across runs (docs/PERF.md).
"""
import glob
import os
import re
import statistics
import sys

LOG = sys.argv[1]
bad = False


def path(*parts):
    return os.path.join(LOG, *parts)


def lines(name):
    try:
        with open(path(name), errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def tsv(name):
    return [line.split("\t") for line in lines(name) if line]


def stages():
    global bad
    print(f"{'stage':<11}{'status':<46}{'seconds':>8}{'budget':>8}")
    for name, st, sec, budget in tsv("stages.tsv"):
        print(f"{name:<11}{st:<46}{sec:>8}{budget:>8}")
        bad = bad or not (st == "ok" or (st.startswith("skipped:") and "no time left" not in st))
    built = [t for t in lines("not-built.txt") if t]
    if built:
        print(f"not built: {' '.join(built)} (build.log)")


def gtest_skips(log):
    """(test name, reason) of every gtest skip in a ctest -V log."""
    out, reason, collecting = [], [], False
    for raw in lines(log):
        line = re.sub(r"^\d+: ", "", raw)
        if line.endswith(": Skipped"):
            reason, collecting = [], True
            continue
        m = re.match(r"\[  SKIPPED \] (\S+) \(\d+ ms\)", line)
        if m:
            out.append((m.group(1), " ".join(reason).strip() or "(no reason given)"))
            collecting = False
        elif collecting:
            if line.startswith("["):
                collecting = False
            else:
                reason.append(line.strip())
    return out


def tests():
    global bad
    rows = tsv("tests.tsv")
    if not rows:
        return
    counts = {}
    for name, st, sec, limit in rows:
        key = re.sub(r" at \d+ s$| \(ctest timeout\)$", "", st)
        counts[key] = counts.get(key, 0) + 1
    print("\nGPU tests: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    for name, st, sec, limit in rows:
        if st not in ("passed", "skipped") and not st.startswith("not run (quick"):
            bad = True
            print(f"  {st}: {name} ({sec} s of {limit}; tests/{name}.log)")
            shown = 0
            for line in lines(os.path.join("tests", name + ".log")):
                line = re.sub(r"^\d+: ", "", line)
                if shown < 8 and re.match(r"(rank \d+: |\[  FAILED  \] \S+ \(|.*Failure$)", line):
                    print("    " + line[:200])
                    shown += 1
    gpus, quick, other = [], [], {}
    for name, st, sec, limit in rows:
        for test, reason in gtest_skips(os.path.join("tests", name + ".log")):
            if re.search(r"needs \d+ GPUs", reason):
                gpus.append((f"{name}: {test}", reason))
            elif "ZW_TEST_WORLDS" in reason:
                quick.append(test)
            else:
                other.setdefault((name, reason), []).append(test)
        if st == "skipped":
            other.setdefault((name, "the whole program skipped (exit 77)"), []).append(name)
    if gpus:
        print(f"  skipped for lack of GPUs ({len(gpus)}):")
        for test, reason in gpus:
            print(f"    {test} — {reason[:160]}")
    if quick:
        print(f"  collectives worlds left out by ZW_TEST_WORLDS (quick mode): {len(quick)}")
    for (name, reason), names in other.items():
        which = names[0] if len(names) == 1 else f"{len(names)} tests"
        print(f"  skipped in {name}: {which} — {reason[:160]}")


def collectives():
    for name in ("zw_gpu_collectives_test", "zw_gpu_collectives_ring_test"):
        out, stalls = [], 0
        for raw in lines(os.path.join("tests", name + ".log")):
            line = re.sub(r"^\d+: ", "", raw)
            if re.match(r"\[env\] |\[n\d+\] \d+ of \d+ cases", line):
                out.append("  " + line[:230])
            elif re.match(r"\[n\d+\] stalled", line):
                stalls += 1
                if stalls <= 2:
                    out.append("  " + line)
            elif 0 < stalls <= 2 and re.match(r"  rank \d+: ", line):
                out.append("  " + line[:200])
            m = re.match(r"\[\s+(OK|FAILED)\s+\] (Worlds/\S+) \((\d+) ms\)", line)
            if m:
                out.append(f"  {m.group(1):<6} {m.group(2)} {int(m.group(3)) / 1000:.1f} s")
        if stalls > 2:
            out.append(f"  ... {stalls} stall reports in all (tests/{name}.log)")
        if out:
            print(f"\n{name}: time per world (rank 0's stages), stalls")
            print("\n".join(out))


def short_files():
    status = lines(os.path.join("memcheck", "status.txt"))
    if status:
        print("\nmemcheck (compute-sanitizer --tool memcheck):")
        for line in status:
            print("  " + line.strip())
    mp = sorted(glob.glob(path("mp4_*.txt")))
    if mp:
        print("\n4 processes on the visible GPU(s), every size validated (sizes, wrong elements):")
        for f in mp:
            rows = [ln for ln in open(f, errors="replace") if re.match(r"^\[0\] +[0-9]", ln)]
            wrong = sum(int(ln.split("|")[1].split()[3]) for ln in rows if len(ln.split("|")) > 1)
            print(f"  {os.path.basename(f)[4:-4]:<24}{len(rows):>3} sizes {wrong:>6} wrong")
    for name, title in (("reduce_bench.txt", "CUDA reduce kernels vs device-to-device copy"),
                        ("offload_bench.txt", "ZeRO-3 offloaded optimizer (zw_offload_bench)"),
                        ("train_gpu.txt", "training comparison (bench/train/gpu.sh)"),
                        ("train_zero3.txt", "ZeRO-3 with the offloaded optimizer, 4 accumulation steps (gpu.sh)")):
        text = lines(name)
        # gpu.sh's table follows its "# summary" line; without one (cut short), its last lines.
        table = [i for i, line in enumerate(text) if line.startswith("# summary")]
        text = text[table[-1]:] if table else text[-15:]
        if text:
            print(f"\n{title}:")
            for line in text[:40]:
                print("  " + line[:240])


def nccl_tables():
    peer = {}
    for p in glob.glob(path("peercopy_*_r*.txt")):
        dtype = os.path.basename(p).split("_")[1]
        for line in open(p, errors="replace"):
            f = line.split()
            if len(f) == 13 and f[0].isdigit():
                peer.setdefault((dtype, int(f[0])), []).append(float(f[7]))
    paths = [path(f"coll_{t}_{dt}.txt") for t in ("allgather", "reducescatter", "allreduce")
             for dt in ("bfloat16", "float")]
    if not any(os.path.exists(p) for p in paths):
        return

    def name(s):
        return f"{s >> 30} GiB" if s >= 1 << 30 else f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"

    def rows(p):
        for line in open(p, errors="replace"):
            f = re.sub(r"^\[\d+\]\s*", "", line).replace("|", " ").split()
            if len(f) >= 15 and f[0].isdigit():
                yield f

    print(f"\n{'op':<14}{'dtype':<10}{'size':>9}{'zw us':>10}{'zw busbw':>10}{'nccl us':>10}{'nccl busbw':>11}"
          f"{'zw/nccl':>9}{'peer':>8}{'wrong':>7}{'zw enq':>8}")
    for p in paths:
        if not os.path.exists(p):
            continue
        t, dt = os.path.basename(p)[5:-4].split("_")
        for f in rows(p):
            size = int(f[0])
            pc = statistics.median(peer[(dt, size)]) if (dt, size) in peer else float("nan")
            wrong = max(int(f[7]), 0) + max(int(f[11]), 0)
            print(f"{t:<14}{dt:<10}{name(size):>9}{float(f[4]):>10.2f}{float(f[5]):>10.1f}{float(f[8]):>10.2f}"
                  f"{float(f[9]):>11.1f}{float(f[12]):>9.3f}{pc:>8.1f}{wrong:>7}{float(f[13]):>8.2f}")
    print(f"\n{'ring op':<14}{'size':>9}{'ring busbw':>12}{'direct busbw':>14}{'nccl busbw':>12}")
    for t in ("allgather", "reducescatter", "allreduce"):
        ring, direct = path(f"ring_{t}_bfloat16.txt"), path(f"coll_{t}_bfloat16.txt")
        if not os.path.exists(ring) or not os.path.exists(direct):
            continue
        d = {int(f[0]): float(f[5]) for f in rows(direct)}
        for f in rows(ring):
            size = int(f[0])
            print(f"{t:<14}{name(size):>9}{float(f[5]):>12.1f}{d.get(size, float('nan')):>14.1f}{float(f[9]):>12.1f}")


def ncclapi():
    """The ncclapi stage's own summary (tools/nccl-tests-check.sh: nccl-tests, torch by LD_PRELOAD, API cost)."""
    text = lines(os.path.join("ncclapi", "summary.txt"))
    if text:
        print("\nlibzwnccl (stage ncclapi, ncclapi/summary.txt):")
        for line in text:
            print("  " + line)


stages()
tests()
collectives()
short_files()
nccl_tables()
ncclapi()
sys.exit(1 if bad else 0)
