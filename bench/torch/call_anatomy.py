"""Where a torch.distributed call on the zerowire backend spends the time that zerowire from C++ does not.

    PYTHONPATH=<site with zerowire> OMP_NUM_THREADS=1 python bench/torch/call_anatomy.py --world 2 \
        [--sizes 256K 1M 4M] [--ops all_gather_into_tensor] [--variants torch py fake raw touch64K touch512K]

Each process runs blocks of `iters` blocking calls, variants interleaved over `reps` rounds, on the same tensors and
communicator (bench_collectives.py's buffers):
- torch: dist.<op> through the zerowire backend; raw: zerowire._C._bench_loop, the whole block in C++;
- py: _bench_loop with one operation per call from a Python loop;
- fake: py, with the same dist.<op> on torch's FakeProcessGroup before each operation. For all_reduce and
  reduce_scatter_tensor that backend touches no data and returns a finished Work, so fake − py is torch.distributed's
  own path per call, which every backend pays, and torch − fake + py − raw is what the zerowire backend adds to it
  (its all_gather copies the input into every chunk of the output: not offered for all_gather_into_tensor);
- touchN: py, then N bytes of a scratch tensor written between calls (what N bytes of other work between two calls
  do to the operation through the caches).
zerowire's own operation records (ZW_FLIGHT_DIR, set here to a temporary folder) split every call into its `gap`
(this rank's end of the previous operation to its start of this one: the caller's code, issue, wait), `both` (the
later rank's start to the later rank's end: the operation once every rank is in it) and `period` (start to start);
medians over every call of every block, rank 0's view. Non-goals: CUDA tensors, worlds over one host, timing
accurate enough for docs/PERF.md's tables (bench_collectives.py does those).
"""
import argparse
import datetime
import glob
import os
import statistics
import struct
import tempfile

import torch
import torch.distributed as dist

import zerowire._C
import zerowire.torch  # noqa: F401
from torch.testing._internal.distributed import fake_pg  # noqa: F401 (registers the "fake" backend)

import launch
from bench_collectives import buffers, call, human, parse_size

# op_record.h's layout (format 2): a 512-byte header (capacity at byte 20, last issued sequence number at byte 488),
# then 96-byte slots of 12 little-endian words: version, seq, coll_index, bytes, count, enqueue_ns, start_ns, end_ns, ...
HEADER, SLOT, LAST_ENQUEUED = 512, 96, 488


def ring_path(rank):
    return glob.glob(os.path.join(os.environ["ZW_FLIGHT_DIR"], f"zw-flight-*-{os.getpid()}-*-r{rank}.bin"))[0]


def last_seq(path):
    with open(path, "rb") as f:
        return struct.unpack_from("<Q", f.read(HEADER), LAST_ENQUEUED)[0]


def records(path, lo, hi):
    """{seq: (start_ns, end_ns)} for operations lo < seq <= hi."""
    with open(path, "rb") as f:
        data = f.read()
    out = {}
    for i in range(struct.unpack_from("<I", data, 20)[0]):
        w = struct.unpack_from("<12Q", data, HEADER + SLOT * i)
        if lo < w[1] <= hi and w[7]:
            out[w[1]] = (w[6], w[7])
    return out


def run_block(v, op, inp, out, group, backend, iters, scratch, fake):
    if v == "raw":
        zerowire._C._bench_loop(backend, op, out, inp, iters)
        return
    if v == "torch":
        for _ in range(iters):
            call(op, inp, out, group)
        return
    for _ in range(iters):
        if v == "fake":
            call(op, inp, out, fake)
        zerowire._C._bench_loop(backend, op, out, inp, 1)
        if scratch is not None:
            scratch.fill_(1.0)


def worker(rank, world, port, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("zerowire", timeout=datetime.timedelta(seconds=600))
    group = dist.group.WORLD
    backend = group._get_backend(torch.device("cpu"))
    # Every rank creates it (new_group is collective); it never communicates.
    fake = dist.new_group(backend="fake") if "fake" in args.variants else None
    ring = ring_path(rank)
    for op in args.ops:
        for nbytes in args.sizes:
            inp, out = buffers(op, nbytes, world, rank)
            blocks = {v: [] for v in args.variants}
            for _ in range(args.reps):
                for v in args.variants:
                    scratch = torch.zeros(max(1, parse_size(v[5:]) // 4)) if v.startswith("touch") else None
                    dist.barrier()
                    call(op, inp, out, group)
                    dist.barrier()
                    lo = last_seq(ring)
                    run_block(v, op, inp, out, group, backend, args.iters, scratch, fake)
                    blocks[v].append((lo, last_seq(ring)))
            dist.barrier()  # every rank's records are written: rank 0 reads them all
            if rank == 0:
                paths = glob.glob(os.path.join(os.environ["ZW_FLIGHT_DIR"], "zw-flight-*-r*.bin"))
                rings = [records(p, 0, 1 << 62) for p in sorted(paths, key=lambda p: int(p[p.rindex("-r") + 2:-4]))]
                for v, spans in blocks.items():
                    gap, both, period = [], [], []
                    for lo, hi in spans:
                        for s in range(lo + 2, hi + 1):
                            if not all(s in r and s - 1 in r for r in rings):
                                continue
                            mine, prev = rings[0][s], rings[0][s - 1]
                            gap.append(mine[0] - prev[1])
                            period.append(mine[0] - prev[0])
                            both.append(max(r[s][1] for r in rings) - max(r[s][0] for r in rings))
                    med = [statistics.median(x) / 1e3 if x else float("nan") for x in (period, gap, both)]
                    print(f"{op:22s} n={world} {human(nbytes):>4s} {v:10s} period {med[0]:8.1f} us  gap {med[1]:6.1f}  "
                          f"both {med[2]:8.1f}  ({len(period)} calls)", flush=True)
            dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--sizes", nargs="+", type=parse_size, default=[256 << 10, 1 << 20, 4 << 20])
    p.add_argument("--ops", nargs="+", default=["all_gather_into_tensor"])
    p.add_argument("--variants", nargs="+", default=["torch", "py", "raw", "touch64K", "touch512K"])
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--iters", type=int, default=100)
    args = p.parse_args()
    if "fake" in args.variants and "all_gather_into_tensor" in args.ops:
        p.error("--variants fake: torch's FakeProcessGroup copies data in all_gather_into_tensor, so it is no "
                "do-nothing backend there; use it with reduce_scatter_tensor and all_reduce")
    with tempfile.TemporaryDirectory(prefix="zw-anatomy-") as d:
        os.environ["ZW_FLIGHT_DIR"] = d  # the forked ranks inherit it
        os.environ.setdefault("ZW_MONITOR_RECORDS", str(1 << 16))
        launch.spawn(worker, args.world, args)


if __name__ == "__main__":
    main()
