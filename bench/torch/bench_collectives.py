"""torch.distributed collectives on CPU tensors: the zerowire backend against Gloo, interleaved, in one job.

    PYTHONPATH=<site with zerowire> python bench/torch/bench_collectives.py --world 4 [--min 4K --max 64M --reps 5]

Every process joins two groups over the same ranks, zerowire (the default group) and Gloo. For each operation
(all_gather_into_tensor and reduce_scatter_tensor out of place, all_reduce in place; float32, sum) and size, the two backends
take turns: `reps` rounds of [zerowire block, Gloo block], each block a barrier, one untimed call, a barrier and
`iters` (10-200, about 64 MiB) back-to-back blocking calls. A block's time is the mean per call, averaged over ranks (nccl-tests' convention, as zw_*_perf prints it);
the table shows each backend's median over rounds with the spread (min-max) and the ratio Gloo/zerowire. Sizes are
nccl-tests' bytes: the output of all_gather, the input of reduce_scatter, the buffer of all_reduce. Buffers are
allocated once per size and the results of one call per size are checked against Gloo's before timing.
--json FILE also writes the rows.
"""
import argparse
import datetime
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import zerowire.torch  # noqa: F401

import launch  # bench/torch/launch.py (the script's own folder is on sys.path)


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def human(n):
    for u, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f}{u}"
    return str(n)


def buffers(op, nbytes, world, rank):
    elems = nbytes // 4
    if op == "all_gather_into_tensor":
        per = elems // world
        return torch.full((per,), float(rank)), torch.empty(per * world)
    if op == "reduce_scatter_tensor":
        per = elems // world
        return torch.full((per * world,), float(rank)), torch.empty(per)
    return torch.full((elems,), float(rank)), torch.empty(elems)


def call(op, inp, out, group):
    if op == "all_gather_into_tensor":
        dist.all_gather_into_tensor(out, inp, group=group)
    elif op == "reduce_scatter_tensor":
        dist.reduce_scatter_tensor(out, inp, group=group)
    else:
        dist.all_reduce(out, group=group)  # in place on the output buffer (zeros while timing: sums stay finite)


def block(op, inp, out, group, iters, gloo):
    dist.barrier(group=group)
    call(op, inp, out, group)  # untimed: the first call after the other backend's block
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        call(op, inp, out, group)
    per_call = (time.perf_counter() - t0) / iters
    t = torch.tensor([per_call], dtype=torch.float64)
    dist.all_reduce(t, group=gloo)
    return float(t) / dist.get_world_size()


def worker(rank, world, port, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("zerowire", timeout=datetime.timedelta(seconds=600))
    gloo = dist.new_group(backend="gloo")
    zw = dist.group.WORLD
    rows = []
    sizes = []
    s = args.min
    while s <= args.max:
        sizes.append(s)
        s *= args.factor
    for op in args.ops:
        for nbytes in sizes:
            inp, out = buffers(op, nbytes, world, rank)
            ref = inp.clone() if op == "all_reduce" else torch.empty_like(out)
            if op == "all_reduce":
                out.copy_(inp)
            call(op, inp, ref, gloo)
            call(op, inp, out, zw)
            assert torch.equal(out, ref), f"{op} {nbytes}: zerowire's result differs from Gloo's"
            out.zero_()
            iters = max(10, min(200, (64 << 20) // max(nbytes, 1)))
            zt, gt = [], []
            for _ in range(args.reps):
                zt.append(block(op, inp, out, zw, iters, gloo))
                gt.append(block(op, inp, out, gloo, iters, gloo))
            row = dict(op=op, world=world, bytes=nbytes, iters=iters, zw_us=statistics.median(zt) * 1e6,
                       zw_min_us=min(zt) * 1e6, zw_max_us=max(zt) * 1e6, gloo_us=statistics.median(gt) * 1e6,
                       gloo_min_us=min(gt) * 1e6, gloo_max_us=max(gt) * 1e6)
            row["ratio"] = row["gloo_us"] / row["zw_us"]
            rows.append(row)
            if rank == 0:
                print(f"{op:24s} n={world} {human(nbytes):>5s}  zerowire {row['zw_us']:10.1f} us "
                      f"[{row['zw_min_us']:.1f}-{row['zw_max_us']:.1f}]  gloo {row['gloo_us']:10.1f} us "
                      f"[{row['gloo_min_us']:.1f}-{row['gloo_max_us']:.1f}]  gloo/zerowire {row['ratio']:5.2f}",
                      flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--min", type=parse_size, default=4 << 10)
    p.add_argument("--max", type=parse_size, default=64 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--ops", nargs="+", default=["all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce"])
    p.add_argument("--json")
    args = p.parse_args()
    launch.spawn(worker, args.world, args)


if __name__ == "__main__":
    main()
