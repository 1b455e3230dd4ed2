#!/usr/bin/python3
"""bench/cpu_adam/torch_adam.py — times torch.optim.Adam and torch.optim.AdamW on one flat fp32 parameter.

Called by zw_cpu_adam_bench once per repetition and thread count. Uses torch's own foreach/fused defaults (nothing
is forced) and the same hyperparameters as the C++ side. Prints one line per optimizer:
"<name> <median Mparam/s> <foreach/fused flags torch chose>". Non-goals: GPU, mixed precision.
"""
import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=100_000_000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.empty(args.params).uniform_(-0.5, 0.5))
    p.grad = torch.empty(args.params).uniform_(-1e-2, 1e-2)
    for name, cls, wd in (("Adam", torch.optim.Adam, 0.0), ("AdamW", torch.optim.AdamW, 0.01)):
        opt = cls([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
        opt.step()  # creates the state (exp_avg, exp_avg_sq); not timed
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        flags = {k: opt.defaults.get(k) for k in ("foreach", "fused") if k in opt.defaults}
        print(f"{name} {args.params / statistics.median(times) / 1e6:.1f} {flags}", flush=True)
        del opt


if __name__ == "__main__":
    main()
