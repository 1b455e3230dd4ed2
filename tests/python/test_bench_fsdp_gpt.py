"""bench/train/fsdp_gpt.py (the FSDP2 anchor of bench/train/gpu.sh) on the CPU, so that the GPU comparison's anchor
is known to train before a device call spends time on it:
  - 2 ranks on the zerowire backend against 1 rank on Gloo with the same global batch (B 2 per rank against B 4):
    rank r's rows are zw_train's (k x WORLD + r) x B, so both train on the same sequences and every logged loss (the
    mean over the ranks) and gradient norm agree within 1e-4 relative;
  - 2 zerowire ranks with 2 accumulation steps and the offload policy (B 1) against 1 Gloo rank with the same
    (B 2): the same 4 sequences per step, equal losses (the references run as one process: Gloo's 2-process runs
    abort now and then at exit, "terminate called without an active exception", after training ended);
  - every run prints the key=value lines gpu.sh reads (tokens_per_s, compile_s).
python test_bench_fsdp_gpt.py   (torch and the zerowire package on PYTHONPATH, as the other torch tests)
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "train", "fsdp_gpt.py")
STEP = re.compile(r"^step (\d+)/\d+ \| loss ([0-9.]+) \| lr \S+ \| norm ([0-9.]+)")


def run(nproc, backend, extra, data):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), SCRIPT,
           "--device", "cpu", "--backend", backend, "--data", data, "--vocab", "256", "--layers", "2",
           "--d-model", "64", "--heads", "4", "--seq-len", "32", "--steps", "5", "--warmup-iters", "1",
           "--warmup-steps", "2", "--log-every", "1", "--timeout-s", "120", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(cmd)} exited {p.returncode}:\n{out[-3000:]}")
    steps = {int(m[1]): (float(m[2]), float(m[3])) for m in map(STEP.match, out.splitlines()) if m}
    keys = dict(line.split("=", 1) for line in out.splitlines() if re.match(r"^(tokens_per_s|compile_s)=", line))
    if sorted(steps) != [1, 2, 3, 4, 5] or set(keys) != {"tokens_per_s", "compile_s"} or float(keys["tokens_per_s"]) <= 0:
        raise SystemExit(f"FAILED: {' '.join(cmd)}: expected 5 step lines and tokens_per_s/compile_s, got:\n{out[-3000:]}")
    return steps


def same(what, a, b, tol=1e-4):
    for step in sorted(a):
        for name, x, y in (("loss", a[step][0], b[step][0]), ("norm", a[step][1], b[step][1])):
            if abs(x - y) > tol * max(abs(x), abs(y), 1e-12):
                raise SystemExit(f"FAILED: {what}: step {step} {name} {x} against {y} (relative tolerance {tol})")
    print(f"ok: {what}: losses {[round(a[s][0], 6) for s in sorted(a)]}", flush=True)


def main():
    with tempfile.TemporaryDirectory(prefix="zw-fsdp-gpt-") as d:
        data = os.path.join(d, "text.bin")
        with open(data, "wb") as f:  # a byte-level corpus: any bytes below --vocab 256 will do
            f.write(bytes((i * 131 + (i >> 7) * 17) % 251 for i in range(200_000)))
        one = run(1, "gloo", ["--batch", "4"], data)
        two = run(2, "zerowire", ["--batch", "2"], data)
        same("2 ranks on zerowire (B 2) against 1 rank on Gloo (B 4)", two, one)
        acc = ["--acc", "2", "--offload", "1"]
        same("2 accumulation steps, CPUOffloadPolicy: 2 ranks on zerowire (B 1) against 1 rank on Gloo (B 2)",
             run(2, "zerowire", ["--batch", "1", *acc], data), run(1, "gloo", ["--batch", "2", *acc], data))
    print("PASSED", flush=True)


if __name__ == "__main__":
    main()
