"""FSDP2 training step time on CPU: the zerowire backend against Gloo, interleaved, in one job.

    PYTHONPATH=<site with zerowire> python bench/torch/bench_fsdp.py --world 2 [--steps 5 --reps 3]
                                                                   [--no-huge-page-advice]

The small GPT of tests/python/test_training.py, larger here (d 256, 4 blocks, T 128, batch 8 per rank), sharded
with fully_shard per block and at the root, AdamW. Two identical models, one on each backend (Gloo's sums and
divides: set_force_sum_reduction_for_comms); they take turns: `reps` rounds of [zerowire: `steps` steps, Gloo:
`steps` steps] after one warm-up step each. Step time = wall time per step, the slowest rank's; the table shows
the median over rounds, the spread and the ratio Gloo/zerowire.
"""
import argparse
import copy
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import zerowire._C
import zerowire.torch  # noqa: F401

import launch  # bench/torch/launch.py (the script's own folder is on sys.path)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python"))
from test_training import GPT  # noqa: E402


def worker(rank, world, port, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(args.threads)
    if args.no_huge_page_advice:  # the backend before its huge-page advice (python/csrc/host_pages.h)
        zerowire._C._huge_page_advice(False)
    dist.init_process_group("zerowire", timeout=datetime.timedelta(seconds=600))
    gloo = dist.new_group(backend="gloo")
    vocab, T, d, layers, heads, batch = 512, 128, 256, 4, 4, 8
    torch.manual_seed(0)
    model = GPT(vocab, T, d, layers, heads)
    runs = {}
    for name, group in (("zerowire", dist.group.WORLD), ("gloo", gloo)):
        mesh = DeviceMesh.from_group(group, "cpu", mesh=list(range(world)))
        m = copy.deepcopy(model)
        for b in m.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(m, mesh=mesh)
        if name == "gloo":
            m.set_force_sum_reduction_for_comms(True)
        runs[name] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3))
    g = torch.Generator().manual_seed(rank)
    idx = torch.randint(0, vocab, (batch, T + 1), generator=g)

    def step(name):
        m, opt = runs[name]
        opt.zero_grad()
        F.cross_entropy(m(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten()).backward()
        opt.step()

    times = {"zerowire": [], "gloo": []}
    for name in times:
        step(name)  # warm-up
    for _ in range(args.reps):
        for name in times:
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step(name)
            t = torch.tensor([(time.perf_counter() - t0) / args.steps], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
            times[name].append(float(t))
    if rank == 0:
        z, gl = statistics.median(times["zerowire"]), statistics.median(times["gloo"])
        print(f"FSDP2 CPU step, {world} processes: zerowire {z * 1e3:.1f} ms "
              f"[{min(times['zerowire']) * 1e3:.1f}-{max(times['zerowire']) * 1e3:.1f}], gloo {gl * 1e3:.1f} ms "
              f"[{min(times['gloo']) * 1e3:.1f}-{max(times['gloo']) * 1e3:.1f}], gloo/zerowire {gl / z:.2f}",
              flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-huge-page-advice", action="store_true",
                   help="zerowire without its huge-page advice for destination tensors (python/csrc/host_pages.h)")
    args = p.parse_args()
    launch.spawn(worker, args.world, args)


if __name__ == "__main__":
    main()
