"""Shared helpers of the zerowire torch backend tests: real processes through torch.distributed.

run(world, fn, *args) forks `world` processes with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR/MASTER_PORT of a TCPStore) or, with store="file", a FileStore; each initialises the default group with
the zerowire backend and a Gloo group over the same ranks, then calls fn(ctx, *args). A failure in any process
fails run() with that process's traceback. Inputs are deterministic per (case, rank), so every rank can also
build every other rank's inputs. ZW_TEST_DUMP_S=N: every process prints the Python stack of each of its threads
after N seconds (faulthandler), so a test cut by an outer time limit shows where each rank was (gpu_stage.sh).
"""
import datetime
import faulthandler
import os
import socket
import sys
import tempfile
import zlib

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import zerowire.torch  # noqa: F401  (registers the backend)

INT_DTYPES = (torch.int32, torch.int64, torch.uint8)
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
DTYPES = FLOAT_DTYPES + INT_DTYPES
# Tolerances where results are not exact (averages, pre-multiplied sums): the dtype's rounding.
RTOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float64: 1e-12}


class Ctx:
    """What a test function gets in each process."""

    def __init__(self, rank, world, gloo, device):
        self.rank = rank
        self.world = world
        self.gloo = gloo          # a Gloo group over the same ranks (the reference)
        self.zw = dist.group.WORLD  # the zerowire default group
        self.device = device


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def values(shape, dtype, salt, rank, lo=-3, hi=3, device="cpu"):
    """Small integers (exact in every dtype and in sums/products of up to 4 ranks), seeded by (salt, rank)."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{salt}/{rank}".encode()))
    if dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=g).bool()
    elif dtype == torch.uint8:
        t = torch.randint(0, hi + 1, shape, generator=g).to(dtype)
    else:
        t = torch.randint(lo, hi + 1, shape, generator=g).to(dtype)
    return t.to(device)


def _entry(rank, world, port, store_path, fn, args, timeout_s, device):
    if os.environ.get("ZW_TEST_DUMP_S"):
        faulthandler.dump_traceback_later(float(os.environ["ZW_TEST_DUMP_S"]), exit=False)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        torch.cuda.set_device(0)
    timeout = datetime.timedelta(seconds=timeout_s)
    backend = "cpu:zerowire,cuda:zerowire" if device == "cuda" else "zerowire"
    if store_path:
        store = dist.FileStore(store_path, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    else:
        dist.init_process_group(backend, timeout=timeout)
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    try:
        fn(Ctx(rank, world, gloo, device), *args)
    finally:
        dist.destroy_process_group()


def run(world, fn, *args, timeout_s=60, store="tcp", device="cpu"):
    """Runs fn(ctx, *args) in `world` forked processes; raises if any of them failed."""
    with tempfile.TemporaryDirectory() as tmp:
        store_path = os.path.join(tmp, "store") if store == "file" else None
        mp.start_processes(_entry, args=(world, free_port(), store_path, fn, args, timeout_s, device), nprocs=world,
                           start_method="fork" if device == "cpu" else "spawn")


def check(failures, name, got, want, exact=True, rtol=None):
    """Appends a description to `failures` unless got equals want (exactly, or within rtol)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        failures.append(f"{name}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}")
        return
    if exact:
        ok = torch.equal(got.cpu(), want.cpu())
    else:
        tol = rtol if rtol is not None else RTOL.get(got.dtype, 0)
        ok = torch.allclose(got.cpu().double(), want.cpu().double(), rtol=tol, atol=tol)
    if not ok:
        diff = (got.cpu().double() - want.cpu().double()).abs()
        where = int(diff.argmax()) if diff.numel() else -1
        failures.append(f"{name}: max |diff| {float(diff.max()) if diff.numel() else 0} at {where} "
                        f"(got {got.flatten()[where].item() if where >= 0 else '-'}, "
                        f"want {want.flatten()[where].item() if where >= 0 else '-'})")


def finish(ctx, failures, total):
    """Raises with every failure of this rank (after all ranks ran every case, so none is left waiting)."""
    dist.barrier()
    if failures:
        shown = "\n  ".join(failures[:40])
        raise AssertionError(f"rank {ctx.rank}: {len(failures)} of {total} checks failed:\n  {shown}")
    if ctx.rank == 0:
        print(f"world {ctx.world}: {total} checks passed", flush=True)


def main_world():
    """The --world N argument of a test script."""
    for i, a in enumerate(sys.argv):
        if a == "--world":
            return int(sys.argv[i + 1])
    return 2
