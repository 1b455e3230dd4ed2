#!/usr/bin/env python3
"""PyTorch's torch.distributed with backend "nccl" on libzwnccl through LD_PRELOAD: a smoke test for the GPU machine.

    python3 tests/nccl/torch_preload_smoke.py BUILD_DIR [NPROC]

Starts NPROC (default 2) processes on GPU 0 (zerowire lets ranks share a GPU; NCCL refuses duplicate GPUs) with
LD_PRELOAD=BUILD_DIR/lib/libzwnccl.so, runs all_reduce (sum, avg), all_gather_into_tensor, reduce_scatter_tensor,
broadcast, all_to_all_single, batch_isend_irecv and barrier on bf16 and f32 CUDA tensors, and checks every result
against what the ranks contributed. Each rank also checks that zerowire created its communicator (its INIT log line),
so a run that silently used NVIDIA's libnccl fails. Exit 0 when every rank passed; 77 without torch or a GPU.
Non-goals: FSDP2 training and the full collectives matrix (the torch helper's tests).
"""
import os
import socket
import subprocess
import sys


def rank_main(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", 0))
    dev = torch.device("cuda", 0)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.full((1024,), float(rank + 1), dtype=dtype, device=dev)
        dist.all_reduce(x)
        assert x[0].item() == world * (world + 1) / 2, ("all_reduce", x[0].item())
        y = torch.full((8,), float(rank + 1), dtype=dtype, device=dev)
        dist.all_reduce(y, op=dist.ReduceOp.AVG)
        assert abs(y[0].item() - (world + 1) / 2) < 1e-2, ("avg", y[0].item())
        mine = torch.arange(16, dtype=dtype, device=dev) + 100 * rank
        full = torch.empty(16 * world, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(full, mine)
        for p in range(world):
            assert full[16 * p + 3].item() == 100 * p + 3, ("all_gather", p)
        inp = torch.ones(16 * world, dtype=dtype, device=dev) * (rank + 1)
        out = torch.empty(16, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out, inp)
        assert out[0].item() == world * (world + 1) / 2, ("reduce_scatter", out[0].item())
        b = torch.full((33,), float(rank), dtype=dtype, device=dev)
        dist.broadcast(b, src=world - 1)
        assert b[32].item() == world - 1, ("broadcast", b[32].item())
        a2a_in = torch.tensor([10 * rank + p for p in range(world)], dtype=dtype, device=dev)
        a2a_out = torch.empty(world, dtype=dtype, device=dev)
        dist.all_to_all_single(a2a_out, a2a_in)
        for p in range(world):
            assert a2a_out[p].item() == 10 * p + rank, ("all_to_all", p)
        send = torch.full((5,), float(rank), dtype=dtype, device=dev)
        recv = torch.empty(5, dtype=dtype, device=dev)
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        assert recv[4].item() == (rank - 1) % world, ("send/recv", recv[4].item())
    dist.barrier()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print(f"rank {rank}: all checks passed", flush=True)


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    try:
        import torch
        if not torch.cuda.is_available():
            print("no GPU visible to torch: skipped")
            return 77
    except ImportError:
        print("no torch: skipped")
        return 77
    build = os.path.abspath(sys.argv[1])
    world = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    lib = os.path.join(build, "lib", "libzwnccl.so")
    if not os.path.exists(lib):
        print(f"{lib} missing: build target zwnccl_shared")
        return 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, LD_PRELOAD=lib, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), ZW_DEBUG="INFO",
               ZW_DEBUG_SUBSYS="INIT", TORCH_NCCL_ASYNC_ERROR_HANDLING="1")
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(world)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    ok = True
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            print(f"rank {r}: timed out")
            ok = False
        zerowire = "communicator 'nccl/" in out
        passed = p.returncode == 0 and "all checks passed" in out and zerowire
        ok = ok and passed
        print(f"rank {r}: exit {p.returncode}, zerowire communicator: {zerowire}, {'ok' if passed else 'FAILED'}")
        if not passed:
            print("\n".join(out.splitlines()[-30:]))
    print("torch on libzwnccl (LD_PRELOAD): " + ("all ranks passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
