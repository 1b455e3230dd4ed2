#!/usr/bin/env python3
"""bench/train/ab.py on the CPU with the real zw_train: two arms of one build (the second with --recompute none and
an environment variable) at a tiny shape, interleaved over two rounds — both arms get two runs and a paired ratio, and
the exit status is 0; an arm whose program fails (`--recompute bad`) shows its runs as missing and makes the exit
status 1 while the other arms still report; an arm whose program does not exist stops everything before the first
run (exit 2), naming the arm.
  ab_test.py ZW_TRAIN AB_PY
"""
import re
import subprocess
import sys
import tempfile


def ab(zw_train, ab_py, arms, work):
    cmd = [sys.executable, ab_py, "--device", "cpu", "--shape", "tiny", "--vocab", "256", "--steps", "3", "--reps", "2",
           "--work", work] + [x for a in arms for x in ("--arm", a)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def row(out, name):
    for line in out.splitlines():
        if line.split()[:1] == [name] and not line.startswith("#"):
            return line
    raise SystemExit(f"FAILED: no table row for arm {name}:\n{out}")


def main():
    zw_train, ab_py = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as work:
        arms = [f"base={zw_train}", f"none=ZW_DEBUG=WARN {zw_train} --recompute none"]
        rc, out = ab(zw_train, ab_py, arms, work)
        if rc != 0:
            raise SystemExit(f"FAILED: exit {rc}, expected 0:\n{out}")
        base, none = row(out, "base"), row(out, "none")
        for line in (base, none):
            runs = re.findall(r"\b\d{3,}\b", line.split(None, 1)[1])
            if len(runs) < 3:  # two runs and the median at least
                raise SystemExit(f"FAILED: expected two runs and a median in {line!r}:\n{out}")
        if not re.search(r"\d\.\d{4} \[\d\.\d{4}-\d\.\d{4}\]", none):
            raise SystemExit(f"FAILED: no paired ratio [range] in {none!r}:\n{out}")
        if "--recompute none" not in out or "ZW_DEBUG=WARN" not in out:
            raise SystemExit(f"FAILED: the arms' commands are not echoed:\n{out}")
        with open(f"{work}/ab.log") as f:
            if f.read().count("## ") != 4:
                raise SystemExit("FAILED: ab.log should hold the 4 runs")
        rc, out = ab(zw_train, ab_py, arms + [f"bad={zw_train} --recompute bad"], work)
        if rc != 1 or out.count("bad round") != 2 or "FAILED" not in out:
            raise SystemExit(f"FAILED: a failing arm should fail its 2 runs and exit 1 (exit {rc}):\n{out}")
        row(out, "base")
        if row(out, "bad").split()[1:3] != ["skipped", "skipped"]:
            raise SystemExit(f"FAILED: the failed arm's runs should show as missing:\n{out}")
        rc, out = ab(zw_train, ab_py, arms + ["gone=/nonexistent/zw_train"], work)
        if rc != 2 or "ab.py: --arm gone: /nonexistent/zw_train is not an executable file" not in out or "round" in out:
            raise SystemExit(f"FAILED: a missing program should stop before any run with exit 2 (exit {rc}):\n{out}")
    print("ab_test: ok")


if __name__ == "__main__":
    main()
