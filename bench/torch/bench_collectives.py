"""torch.distributed collectives on CPU tensors: the zerowire backend against Gloo, interleaved, in one job.

    PYTHONPATH=<site with zerowire> python bench/torch/bench_collectives.py --world 4 [--min 4K --max 64M --reps 5]

Every process joins two groups over the same ranks, zerowire (the default group) and Gloo. For each operation
(all_gather_into_tensor and reduce_scatter_tensor out of place, all_reduce in place; float32, sum) and size, the
variants take turns: `reps` rounds of [zerowire, Gloo, zw-raw, zw-py, zw-thp, zw-4k] blocks, each block a barrier,
one untimed call, a barrier and `iters` (10-200, about 64 MiB) back-to-back blocking calls:
- zerowire, Gloo: torch.distributed calls on tensors as a torch user makes them (torch.full / torch.empty: torch's
  allocator, 4 KiB pages where transparent huge pages are `madvise`, as on most distributions);
- zw-raw: the same operation on the same tensors straight on the zerowire group's communicator from C++
  (zerowire._C._bench_loop: no Python, c10d, Work or Future), so zerowire / zw-raw is the binding's own cost
  together with what any code between two calls costs: zw-raw's calls follow each other with the buffers and
  zerowire's own code hot in the caches, which no caller with work between its calls gets;
- zw-py: the same C++ call, one operation per call, from a Python loop (the cheapest code a caller can run between
  two calls), so zerowire / zw-py is what torch.distributed and the binding add beyond returning to Python
  (docs/PERF.md, 2026-12-02 "binding overhead at 256 KiB - 4 MiB");
- zw-thp: torch.distributed calls on tensors over 2 MiB-aligned, MADV_HUGEPAGE, pre-faulted memory (how zw_*_perf
  allocates its buffers), so zerowire / zw-thp is what torch's 4 KiB pages cost zerowire;
- zw-4k: zerowire on its own tensors made the same way, with the backend's huge-page advice for destination tensors
  turned off (zerowire._C._huge_page_advice(False), python/csrc/host_pages.h): the backend as it was before that
  advice, so zw-4k / zerowire is what the advice gains. (The zerowire variant's buffers move onto huge pages at their
  third use, which the untimed calls before the rounds make: a one-time cost no timed block includes.)
`--variants` picks a subset (zerowire and gloo are always run). A block's time is the mean per call, averaged over ranks (nccl-tests' convention, as zw_*_perf prints it);
the table shows each backend's median over rounds with the spread (min-max) and the ratio Gloo/zerowire. Sizes are
nccl-tests' bytes: the output of all_gather, the input of reduce_scatter, the buffer of all_reduce. Buffers are
allocated once per size and the results of one call per size are checked against Gloo's before timing.
--json FILE also writes the rows.
"""
import argparse
import ctypes
import datetime
import json
import mmap
import os
import statistics
import time

import torch
import torch.distributed as dist

import zerowire._C
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


HUGE = 2 << 20


def thp_tensor(elems, value, keep):
    """A float32 tensor over anonymous private memory starting on a 2 MiB boundary, advised MADV_HUGEPAGE and filled
    (faulted) once, as zw_*_perf allocates; `keep` holds the mapping alive."""
    m = mmap.mmap(-1, max(elems * 4, 1) + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    keep.append(m)
    return torch.frombuffer(m, dtype=torch.float32, count=elems, offset=(-addr) % HUGE).fill_(value)


def buffers(op, nbytes, world, rank, make=None):
    make = make or (lambda n, v: torch.full((n,), v))
    elems = nbytes // 4
    if op == "all_gather_into_tensor":
        per = elems // world
        return make(per, float(rank)), make(per * world, 0.0)
    if op == "reduce_scatter_tensor":
        per = elems // world
        return make(per * world, float(rank)), make(per, 0.0)
    return make(elems, float(rank)), make(elems, 0.0)


def call(op, inp, out, group):
    if op == "all_gather_into_tensor":
        dist.all_gather_into_tensor(out, inp, group=group)
    elif op == "reduce_scatter_tensor":
        dist.reduce_scatter_tensor(out, inp, group=group)
    else:
        dist.all_reduce(out, group=group)  # in place on the output buffer (zeros while timing: sums stay finite)


def block(op, inp, out, group, iters, gloo, raw=False, advice=True):
    previous = zerowire._C._huge_page_advice(advice)
    try:
        return timed_block(op, inp, out, group, iters, gloo, raw)
    finally:
        zerowire._C._huge_page_advice(previous)


def timed_block(op, inp, out, group, iters, gloo, raw):
    dist.barrier(group=group)
    call(op, inp, out, group)  # untimed: the first call after the other backend's block
    dist.barrier(group=group)
    if raw == "py":
        backend = group._get_backend(torch.device("cpu"))
        t0 = time.perf_counter()
        for _ in range(iters):
            zerowire._C._bench_loop(backend, op, out, inp, 1)
        per_call = (time.perf_counter() - t0) / iters
    elif raw:
        per_call = zerowire._C._bench_loop(group._get_backend(torch.device("cpu")), op, out, inp, iters) / iters
    else:
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
            # Two more untimed calls: the destination moves onto huge pages at its third use (the backend's advice,
            # python/csrc/host_pages.h), a one-time cost kept out of every timed block (even with --reps 1).
            for _ in range(2):
                call(op, inp, out, zw)
            keep = []
            if "thp" in args.variants:
                thp_in, thp_out = buffers(op, nbytes, world, rank, lambda n, v: thp_tensor(n, v, keep))
            if "4k" in args.variants:
                k4_in, k4_out = buffers(op, nbytes, world, rank)
                if op == "all_reduce":
                    k4_in = k4_out = torch.zeros_like(k4_out)
            iters = max(10, min(200, (64 << 20) // max(nbytes, 1)))
            times = {v: [] for v in ("zw", "gloo", *args.variants)}
            for _ in range(args.reps):
                times["zw"].append(block(op, inp, out, zw, iters, gloo))
                times["gloo"].append(block(op, inp, out, gloo, iters, gloo))
                if "raw" in args.variants:
                    times["raw"].append(block(op, inp, out, zw, iters, gloo, raw=True))
                if "py" in args.variants:
                    times["py"].append(block(op, inp, out, zw, iters, gloo, raw="py"))
                if "thp" in args.variants:
                    times["thp"].append(block(op, thp_in, thp_out, zw, iters, gloo))
                if "4k" in args.variants:
                    times["4k"].append(block(op, k4_in, k4_out, zw, iters, gloo, advice=False))
            row = dict(op=op, world=world, bytes=nbytes, iters=iters)
            for v, ts in times.items():
                row.update({f"{v}_us": statistics.median(ts) * 1e6, f"{v}_min_us": min(ts) * 1e6,
                            f"{v}_max_us": max(ts) * 1e6})
            row["ratio"] = row["gloo_us"] / row["zw_us"]
            rows.append(row)
            if rank == 0:
                cells = "  ".join(f"{name} {row[v + '_us']:9.1f} [{row[v + '_min_us']:.1f}-{row[v + '_max_us']:.1f}]"
                                  for v, name in (("zw", "zerowire"), ("gloo", "gloo"), ("raw", "zw-raw"),
                                                  ("py", "zw-py"), ("thp", "zw-thp"), ("4k", "zw-4k")) if v in times)
                print(f"{op:22s} n={world} {human(nbytes):>4s} us: {cells}  gloo/zerowire {row['ratio']:5.2f}",
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
    p.add_argument("--variants", nargs="*", default=["raw", "thp", "4k"], choices=["raw", "py", "thp", "4k"])
    p.add_argument("--json")
    args = p.parse_args()
    launch.spawn(worker, args.world, args)


if __name__ == "__main__":
    main()
