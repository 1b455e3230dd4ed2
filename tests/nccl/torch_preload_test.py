#!/usr/bin/env python3
"""PyTorch's torch.distributed with backend "nccl" on libzwnccl through LD_PRELOAD (issue 19), for the GPU machine.

    python3 tests/nccl/torch_preload_test.py BUILD_DIR --part smoke|matrix|fsdp [--world N] [--log-dir DIR]

Each part starts N (default 2) processes on GPU 0 (zerowire lets ranks share a GPU; NCCL refuses duplicate GPUs) with
LD_PRELOAD=BUILD_DIR/lib/libzwnccl.so, ZW_DEBUG=INFO and ZW_DEBUG_SUBSYS=INIT. A rank passes only when its checks
passed and its log shows that zerowire created its communicator, so a run that silently used NVIDIA's libnccl fails.
  smoke   all_reduce (sum, avg), all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single,
          batch_isend_irecv and barrier in bf16 and f32, checked against what the ranks contributed.
  matrix  tests/python's collectives matrix (test_collectives.Matrix: every operation x dtype x size 0/1/7/1031, a
          size sweep, coalesced groups, point-to-point), the default group on "nccl", a Gloo group on host copies as
          the reference. Left out: the zerowire backend's own refusals (Matrix.refused), and the future-value check
          of its async cases (ProcessGroupNCCL's futures hold its own output lists; work.wait() is used instead).
  fsdp    FSDP2 (fully_shard per block and at the root) of tests/python's GPT at GPT-2 small (12 layers, 768 wide,
          vocabulary 50304, 256 tokens, batch 4 per rank), AdamW, 6 steps. The reference is the same model trained
          without distribution in each process, on every rank's batch, minimizing the mean of the per-rank losses
          (what FSDP2's averaged gradients compute): every rank's loss at every step within 1e-4 (relative) of the
          reference's loss on that rank's batch, and the parameters within 1e-4 after the last step.
Exit 0 when every rank passed; 77 without torch or a GPU. `--device cpu --backend gloo` runs the same code on the CPU
with Gloo instead of NCCL and no preload (a dry run of this file for machines without a GPU; smaller model).
Non-goals: the zerowire torch backend (tests/python), speed.
"""
import argparse
import os
import socket
import subprocess
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
PYTESTS = os.path.join(HERE, "..", "python")


def import_python_tests():
    """tests/python's helpers without the zerowire backend package (zw_testing imports it to register it)."""
    sys.modules.setdefault("zerowire", types.ModuleType("zerowire"))
    sys.modules.setdefault("zerowire.torch", types.ModuleType("zerowire.torch"))
    sys.path.insert(0, PYTESTS)
    import test_collectives  # noqa: E402
    import test_training  # noqa: E402
    import zw_testing  # noqa: E402
    return test_collectives, test_training, zw_testing


def init(args):
    import datetime

    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=args.timeout)
    if args.device == "cuda":
        torch.cuda.set_device(0)
        dist.init_process_group(args.backend, rank=args.rank, world_size=args.world, timeout=timeout,
                                device_id=torch.device("cuda", 0))
    else:
        dist.init_process_group(args.backend, rank=args.rank, world_size=args.world, timeout=timeout)
    return torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")


def smoke(args):
    import torch
    import torch.distributed as dist

    dev = init(args)
    rank, world = args.rank, args.world
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.full((1024,), float(rank + 1), dtype=dtype, device=dev)
        dist.all_reduce(x)
        assert x[0].item() == world * (world + 1) / 2, ("all_reduce", dtype, x[0].item())
        y = torch.full((8,), float(rank + 1), dtype=dtype, device=dev)
        dist.all_reduce(y, op=dist.ReduceOp.AVG)
        assert abs(y[0].item() - (world + 1) / 2) < 1e-2, ("avg", dtype, y[0].item())
        mine = torch.arange(16, dtype=dtype, device=dev) + 100 * rank
        full = torch.empty(16 * world, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(full, mine)
        for p in range(world):
            assert full[16 * p + 3].item() == 100 * p + 3, ("all_gather", dtype, p)
        inp = torch.ones(16 * world, dtype=dtype, device=dev) * (rank + 1)
        out = torch.empty(16, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out, inp)
        assert out[0].item() == world * (world + 1) / 2, ("reduce_scatter", dtype, out[0].item())
        b = torch.full((33,), float(rank), dtype=dtype, device=dev)
        dist.broadcast(b, src=world - 1)
        assert b[32].item() == world - 1, ("broadcast", dtype, b[32].item())
        a2a_in = torch.tensor([10 * rank + p for p in range(world)], dtype=dtype, device=dev)
        a2a_out = torch.empty(world, dtype=dtype, device=dev)
        dist.all_to_all_single(a2a_out, a2a_in)
        for p in range(world):
            assert a2a_out[p].item() == 10 * p + rank, ("all_to_all", dtype, p)
        send = torch.full((5,), float(rank), dtype=dtype, device=dev)
        recv = torch.empty(5, dtype=dtype, device=dev)
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        assert recv[4].item() == (rank - 1) % world, ("send/recv", dtype, recv[4].item())
    dist.barrier()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dist.destroy_process_group()
    print(f"rank {rank}: smoke: all checks passed", flush=True)


def nccl_premul_factor(dtype, factor):
    """The PREMUL_SUM factor NCCL applies under torch's ProcessGroupNCCL. torch 2.11 stores a bfloat16 op's factor
    as a 4-byte float and NCCL reads 2 bytes of it (ncclTypeSize), the float's low half: a bfloat16 of 0 for every
    power of two, garbage otherwise (pytorch/pytorch#190745, fixed after 2.11). libzwnccl reads the scalar as NCCL
    does, so the drop-in gives NCCL's numbers, and this reference says what they are."""
    import struct

    import torch

    if dtype != torch.bfloat16 or not torch.__version__.startswith("2.11"):
        return factor
    low = struct.pack("<f", factor)[:2]
    return struct.unpack("<f", b"\x00\x00" + low)[0]


def matrix(args):
    import torch.distributed as dist

    test_collectives, _, zw_testing = import_python_tests()
    dev = init(args)
    gloo = dist.new_group(backend="gloo")

    class NcclMatrix(test_collectives.Matrix):
        def wait(self, work, outputs):
            if work is not None:
                work.wait()

        def premul_factor(self, dtype, factor):
            return nccl_premul_factor(dtype, factor)

    ctx = zw_testing.Ctx(args.rank, args.world, gloo, dev.type)
    m = NcclMatrix(ctx)
    start, unsupported = time.time(), 0
    for fn, fargs in m.plan():
        try:
            if fn.__name__ != "refused":
                fn(*fargs)
        except RuntimeError as e:  # the dry run: what Gloo lacks (AVG, PREMUL_SUM, ...) on both ranks alike
            if args.backend != "gloo" or "loo" not in str(e) and "not supported" not in str(e):
                raise
            unsupported += 1
        m.case += 1
        if args.rank == 0 and m.case % 100 == 0:
            print(f"matrix: {m.case} cases, {m.total} checks, {len(m.failures)} failed, {time.time() - start:.1f} s",
                  flush=True)
    for _ in range(3):
        dist.barrier()
    try:
        zw_testing.finish(ctx, m.failures, m.total)
    finally:
        dist.destroy_process_group()
    print(f"rank {args.rank}: matrix: all checks passed ({m.total} checks, {time.time() - start:.1f} s"
          + (f"; {unsupported} cases {args.backend} lacks" if unsupported else "") + ")", flush=True)


def fsdp(args):
    import copy

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    _, test_training, _ = import_python_tests()
    dev = init(args)
    big = dev.type == "cuda"
    vocab, T, d, layers, heads, batch = (50304, 256, 768, 12, 12, 4) if big else (256, 32, 64, 2, 4, 4)
    torch.manual_seed(0)
    model = test_training.GPT(vocab, T, d, layers, heads).to(dev)
    ref = copy.deepcopy(model)
    mesh = init_device_mesh(dev.type, (args.world,))
    m = copy.deepcopy(model)
    for blk in m.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(m, mesh=mesh)
    if args.backend == "gloo":
        m.set_force_sum_reduction_for_comms(True)  # Gloo has no AVG: FSDP2 sums and divides
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    worst, losses, start = 0.0, [], time.time()
    for step in range(6):
        batches = [torch.randint(0, vocab, (batch, T + 1), generator=torch.Generator().manual_seed(77 * step + r))
                   .to(dev) for r in range(args.world)]
        idx = batches[args.rank]
        opt.zero_grad()
        loss = F.cross_entropy(m(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        opt.step()
        ref_opt.zero_grad()
        ref_losses = [F.cross_entropy(ref(b[:, :-1]).flatten(0, 1), b[:, 1:].flatten()) for b in batches]
        (sum(ref_losses) / args.world).backward()
        ref_opt.step()
        got, want = loss.item(), ref_losses[args.rank].item()
        worst = max(worst, abs(got - want) / abs(want))
        losses.append((got, want))
    assert worst <= 1e-4, f"rank {args.rank}: FSDP2 losses (zerowire, reference) differ by {worst:.2e}: {losses}"
    diff = max(float((p.full_tensor() - q.detach()).abs().max()) for p, q in zip(m.parameters(), ref.parameters()))
    assert diff <= 1e-4, f"rank {args.rank}: FSDP2 parameters differ from the reference's by {diff:.2e}"
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {args.rank}: fsdp: all checks passed: losses {[f'{a:.5f}' for a, _ in losses]}, reference "
          f"{[f'{b:.5f}' for _, b in losses]}, max relative loss difference {worst:.2e}, max parameter difference "
          f"{diff:.2e} ({time.time() - start:.1f} s for 6 steps)", flush=True)


PARTS = {"smoke": smoke, "matrix": matrix, "fsdp": fsdp}


def launch(args):
    """Starts the ranks, waits for them, reports each. Returns the exit status."""
    try:
        import torch
        if args.device == "cuda" and not torch.cuda.is_available():
            print("no GPU visible to torch: skipped")
            return 77
    except ImportError:
        print(f"no torch in {sys.executable}: skipped")
        return 77
    preload = args.backend == "nccl"
    lib = os.path.join(os.path.abspath(args.build), "lib", "libzwnccl.so")
    if preload and not os.path.exists(lib):
        print(f"{lib} missing: build target zwnccl_shared")
        return 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), ZW_DEBUG="INFO", ZW_DEBUG_SUBSYS="INIT",
               TORCH_NCCL_ASYNC_ERROR_HANDLING="1", OMP_NUM_THREADS="2")
    if preload:
        env["LD_PRELOAD"] = lib + (":" + os.environ["LD_PRELOAD"] if os.environ.get("LD_PRELOAD") else "")
    env.setdefault("ZW_TIMEOUT", "60")
    log_dir = args.log_dir or os.path.join(os.path.abspath(args.build), "torch-preload")
    os.makedirs(log_dir, exist_ok=True)
    procs, logs = [], []
    for r in range(args.world):
        path = os.path.join(log_dir, f"{args.part}_rank{r}.log")
        logs.append(path)
        with open(path, "w") as f:
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), args.build, "--part", args.part, "--rank", str(r),
                 "--world", str(args.world), "--device", args.device, "--backend", args.backend,
                 "--timeout", str(args.timeout)], env=env, stdout=f, stderr=subprocess.STDOUT))
    deadline = time.time() + args.timeout
    ok = True
    for r, p in enumerate(procs):
        try:
            p.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            p.wait()
            print(f"rank {r}: timed out after {args.timeout} s")
            ok = False
    for r, (p, path) in enumerate(zip(procs, logs)):
        with open(path, errors="replace") as f:
            out = f.read()
        zerowire = not preload or "communicator 'nccl/" in out
        passed = p.returncode == 0 and f"rank {r}: {args.part}: all checks passed" in out and zerowire
        ok = ok and passed
        summary = [line for line in out.splitlines() if "all checks passed" in line]
        print(f"rank {r}: exit {p.returncode}, zerowire communicator: {zerowire}, {'ok' if passed else 'FAILED'}"
              + (f": {summary[0]}" if summary and r == 0 else ""))
        if not passed:
            print("\n".join("    " + line for line in out.splitlines()[-40:]))
    print(f"torch {args.part} on {'libzwnccl (LD_PRELOAD)' if preload else args.backend}, {args.world} processes on "
          f"{args.device}: " + ("all ranks passed" if ok else "FAILED") + f" (logs in {log_dir})")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--part", choices=sorted(PARTS), required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    ap.add_argument("--timeout", type=int, default=240, help="seconds for the whole part")
    ap.add_argument("--log-dir")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None:
        PARTS[args.part](args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
