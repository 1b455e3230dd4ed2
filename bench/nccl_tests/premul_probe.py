#!/usr/bin/env python3
"""What a PREMUL_SUM through torch's "nccl" backend gives, at world size 1 on GPU 0 (issue 19: libzwnccl must give
NCCL's numbers, wrong ones included: torch 2.11 hands NCCL a bf16 factor as a 4-byte float of which NCCL reads 2
bytes, pytorch/pytorch#190745). Run it once on the system NCCL and once with libzwnccl preloaded, and compare:

    TAG=nccl python3 bench/nccl_tests/premul_probe.py
    TAG=zwnccl PORT=29534 LD_PRELOAD=$PWD/build-gpu/lib/libzwnccl.so python3 bench/nccl_tests/premul_probe.py

Prints one line per dtype and factor: all_reduce and reduce_scatter_tensor of -6.0. Non-goals: more ranks, speed.
"""
import os

import torch
import torch.distributed as dist

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29533"), RANK="0", WORLD_SIZE="1")
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for f in (0.5, 1 / 3, 0.3):
        t = torch.full((9,), -6.0, device="cuda", dtype=dtype)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(f))
        o = torch.full((9,), -6.0, device="cuda", dtype=dtype)
        r = torch.empty(9, device="cuda", dtype=dtype)
        dist.reduce_scatter_tensor(r, o, op=dist._make_nccl_premul_sum(f))
        torch.cuda.synchronize()
        print(f"{os.environ.get('TAG', '?')}: {dtype} factor {f:.6f}: all_reduce {t[0].item():.6g} "
              f"reduce_scatter {r[0].item():.6g}", flush=True)
dist.destroy_process_group()
