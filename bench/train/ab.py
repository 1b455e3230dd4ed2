#!/usr/bin/env python3
"""zw_train builds or settings side by side: what a change to the trainer's path does to tokens/s, and where.

  bench/train/ab.py --arm NAME='[VAR=VALUE ...] PROGRAM [FLAG ...]' --arm ... [--shape 124m] [--reps 3]
                    [--steps 30] [--warmup 5] [--device cuda] [--vocab 50304] [--profile] [--profile-steps 8]
                    [--work DIR] [--deadline SECONDS]

Every arm is one zw_train program (a build: build-base/tools/zw_train/zw_train) with its own environment and extra
flags (`--recompute none`, `ZW_CUDA_ATTENTION=zw`), run on the same shape, tokens and flags as bench/train/gpu.sh's
`zw` impl. The arms run interleaved, in an order rotated every round, REPS rounds; the table gives per arm its
runs' tokens/s, their median and range, MFU and peak device memory, and the paired ratio to the first arm (each
round's arm over the same round's first arm: median and range over the rounds), so that a drift of the machine
over the call falls on both sides. With --profile, one more run per arm with `zw_train --profile` (CUDA) gives the
per-op device time per step side by side, and each op's difference to the first arm.

The token shard is gpu.sh's (python's random.Random(1337), tokens below min(50257, vocab)). Raw lines go to
WORK/ab.log as they come; a run that would start after --deadline is skipped and shows as such. Exit status 0 when
every run ran, 1 when one failed (its arm still reports the others), 2 on bad arguments (an arm's program that is not
an executable file) before anything runs. Non-goals: PyTorch anchors (gpu.sh runs those), several processes per arm.
"""
import argparse
import array
import os
import random
import re
import shlex
import statistics
import struct
import subprocess
import sys
import tempfile
import time

SHAPES = {  # name: (layers, d_model, heads, seq_len, batch), as bench/train/gpu.sh
    "124m": (12, 768, 12, 1024, 16),
    "1.3b": (24, 2048, 16, 1024, 8),
    "1.3b-t4096": (24, 2048, 16, 4096, 2),
    "tiny": (2, 128, 4, 256, 4),
}
DONE = re.compile(r"^(?:\[0\] )?zw_train: done, .*? median ([0-9.]+) tokens/s(?:, MFU ([0-9.]+) %)?"
                  r"(?:, peak device memory ([0-9.]+) GiB)?")
PROFILE_ROW = re.compile(r"^(\S.*?)\s{2,}([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%$")


def usage_error(message):
    print(f"ab.py: {message}", file=sys.stderr)
    sys.exit(2)


class Arm:
    def __init__(self, spec):
        name, sep, rest = spec.partition("=")
        words = shlex.split(rest)
        env = {}
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if not sep or not name or not words:
            usage_error(f"--arm {spec!r}: use NAME='[VAR=VALUE ...] PROGRAM [FLAG ...]'")
        self.name, self.env, self.program, self.flags = name, env, words[0], words[1:]
        self.runs = []  # tokens/s per round (None: failed or skipped)
        self.mfu, self.peak = [], []
        self.profile = {}  # op -> ms/step

    def describe(self):
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return " ".join(x for x in (env, self.program, " ".join(map(shlex.quote, self.flags))) if x)


def write_shard(path, tokens, seed, top):
    raw = array.array("H", random.Random(seed).randbytes(2 * tokens))
    values = array.array("H", [(v * top) >> 16 for v in raw])
    if sys.byteorder == "big":
        values.byteswap()
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, tokens, *([0] * 253)))
        f.write(values.tobytes())


def common_flags(args, shard, out_dir, steps):
    layers, d_model, heads, seq, batch = args.dims
    flags = ["--device", args.device, "--layers", str(layers), "--d-model", str(d_model), "--heads", str(heads),
             "--seq-len", str(seq), "--vocab", str(args.vocab), "--batch", str(batch), "--steps", str(steps),
             "--lr", "6e-4", "--min-lr", "6e-5", "--warmup-steps", str(args.warmup), "--weight-decay", "0.1",
             "--grad-clip", "1.0", "--seed", "1337", "--data-bin", shard, "--out-dir", out_dir, "--log-every", "10",
             "--eval-every", "0", "--eval-batches", "1", "--ckpt-every", "-1"]
    if args.device == "cuda":
        flags += ["--dtype", "bf16", "--peak-tflops", str(args.peak_tflops)]
    return flags


def run(arm, args, shard, log, steps, extra=()):
    cmd = [arm.program] + common_flags(args, shard, os.path.join(args.work, "out-" + arm.name), steps) + arm.flags
    cmd += list(extra)
    env = dict(os.environ, **arm.env)
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
        out = p.stdout + p.stderr
        rc = p.returncode
    except subprocess.TimeoutExpired as e:
        raw = e.stdout or ""
        out, rc = (raw.decode(errors="replace") if isinstance(raw, bytes) else raw), 124
    except OSError as e:
        out, rc = f"cannot run {arm.program}: {e}", 127
    log.write(f"## {arm.name}: {' '.join(map(shlex.quote, cmd))} (exit {rc})\n{out}\n")
    log.flush()
    return rc, out


def parse_done(out):
    for line in reversed(out.splitlines()):
        m = DONE.match(line)
        if m:
            return float(m[1]), m[2] and float(m[2]), m[3] and float(m[3])
    return None


def parse_profile(out):
    rows, inside = {}, False
    for line in out.splitlines():
        if line.startswith("op (device time)"):
            rows, inside = {}, True  # the last table of the run
        elif inside:
            m = PROFILE_ROW.match(line)
            if m:
                rows[m[1].strip()] = float(m[3])
            elif line.startswith("total"):
                rows["total"] = float(line.split()[-1])
                inside = False
    return rows


def median_range(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None, None
    return statistics.median(values), min(values), max(values)


def report(arms):
    first = arms[0]
    print(f"{'arm':<16} {'runs (tokens/s)':<36} {'median':>9} {'min-max':>17}  {'vs ' + first.name:>24} "
          f"{'MFU %':>6} {'peak GiB':>8}")
    for arm in arms:
        runs = " ".join("skipped" if v is None else f"{v:.0f}" for v in arm.runs)
        med, lo, hi = median_range(arm.runs)
        ratios = [a / b for a, b in zip(arm.runs, first.runs) if a is not None and b is not None]
        rmed, rlo, rhi = median_range(ratios)
        ratio = "-" if arm is first or rmed is None else f"{rmed:.4f} [{rlo:.4f}-{rhi:.4f}]"
        mfu = statistics.median(arm.mfu) if arm.mfu else None
        peak = max(arm.peak) if arm.peak else None
        print(f"{arm.name:<16} {runs:<36} {med or 0:>9.0f} {f'{lo or 0:.0f}-{hi or 0:.0f}':>17}  {ratio:>24} "
              f"{'-' if mfu is None else f'{mfu:.1f}':>6} {'-' if peak is None else f'{peak:.1f}':>8}")


def report_profile(arms):
    ops = []
    for arm in arms:
        ops += [op for op in arm.profile if op not in ops and op != "total"]
    first = arms[0]
    ops.sort(key=lambda op: -max(a.profile.get(op, 0.0) for a in arms))
    head = "".join(f"{a.name[:12]:>13}" for a in arms)
    deltas = "".join(f"{'Δ ' + a.name[:10]:>13}" for a in arms[1:])
    print(f"\n{'op (device ms per step)':<30}{head}{deltas}")
    for op in ops + ["total"]:
        cells = "".join(f"{a.profile[op]:>13.3f}" if op in a.profile else f"{'-':>13}" for a in arms)
        diff = "".join(f"{a.profile[op] - first.profile[op]:>+13.3f}" if op in a.profile and op in first.profile
                       else f"{'-':>13}" for a in arms[1:])
        print(f"{op:<30}{cells}{diff}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arm", action="append", required=True, help="NAME='[VAR=VALUE ...] PROGRAM [FLAG ...]'")
    ap.add_argument("--shape", default="124m", help=f"{', '.join(SHAPES)} or L:C:H:T:B")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="zw_train's LR warmup steps")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--peak-tflops", type=float, default=989.4)
    ap.add_argument("--profile", action="store_true", help="then one --profile run per arm (CUDA)")
    ap.add_argument("--profile-steps", type=int, default=8)
    ap.add_argument("--work", help="directory for the shard, outputs and ab.log (default: a new temporary one)")
    ap.add_argument("--deadline", type=float, default=1e9, help="no run starts after this many seconds")
    ap.add_argument("--run-timeout", type=float, default=600)
    args = ap.parse_args()
    if args.shape in SHAPES:
        args.dims = SHAPES[args.shape]
    else:
        try:
            args.dims = tuple(int(x) for x in args.shape.split(":"))
        except ValueError:
            args.dims = ()
        if len(args.dims) != 5:
            usage_error(f"--shape {args.shape!r}: use one of {', '.join(SHAPES)} or L:C:H:T:B")
    arms = [Arm(spec) for spec in args.arm]
    if len({a.name for a in arms}) != len(arms):
        usage_error("--arm: every arm needs its own name")
    for arm in arms:
        if not (os.path.isfile(arm.program) and os.access(arm.program, os.X_OK)):
            usage_error(f"--arm {arm.name}: {arm.program} is not an executable file (build it, or give its path)")
    args.work = args.work or tempfile.mkdtemp(prefix="zw-ab-")
    os.makedirs(args.work, exist_ok=True)
    start = time.monotonic()
    layers, d_model, heads, seq, batch = args.dims
    tokens = max(1 << 20, batch * (seq + 1) * args.steps * 10 // 9 + 1)
    shard = os.path.join(args.work, "tokens.bin")
    write_shard(shard, tokens, 1337, min(50257, args.vocab))
    print(f"# bench/train/ab.py: {len(arms)} arms x {args.reps} rounds, shape {args.shape} (L{layers} d{d_model} "
          f"{heads}h T{seq} B{batch}), {args.steps} steps, {args.device}; work {args.work}")
    for arm in arms:
        print(f"#   {arm.name}: {arm.describe()}")
    ok = True
    with open(os.path.join(args.work, "ab.log"), "a") as log:
        for rep in range(args.reps):
            for i in range(len(arms)):
                arm = arms[(i + rep) % len(arms)]
                if time.monotonic() - start > args.deadline:
                    print(f"[{time.monotonic() - start:5.0f}s] {arm.name} round {rep + 1}: skipped (deadline)")
                    arm.runs.append(None)
                    continue
                rc, out = run(arm, args, shard, log, args.steps)
                done = parse_done(out)
                if rc != 0 or done is None:
                    ok = False
                    arm.runs.append(None)
                    tail = "\n    ".join(out.strip().splitlines()[-5:])
                    print(f"[{time.monotonic() - start:5.0f}s] {arm.name} round {rep + 1}: FAILED (exit {rc})\n    {tail}")
                    continue
                arm.runs.append(done[0])
                if done[1] is not None:
                    arm.mfu.append(done[1])
                if done[2] is not None:
                    arm.peak.append(done[2])
                print(f"[{time.monotonic() - start:5.0f}s] {arm.name} round {rep + 1}: {done[0]:.0f} tokens/s", flush=True)
        if args.profile:
            for arm in arms:
                if time.monotonic() - start > args.deadline:
                    break
                rc, out = run(arm, args, shard, log, args.profile_steps, ["--profile"])
                arm.profile = parse_profile(out) if rc == 0 else {}
    print()
    report(arms)
    if args.profile and any(a.profile for a in arms):
        report_profile(arms)
    print(f"# total wall time {time.monotonic() - start:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
