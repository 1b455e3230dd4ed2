"""bench/torch/launch.py — starts a benchmark's worker(rank, world, port, args) in `world` forked processes that meet
through a TCP store on a free local port (shared by bench_collectives.py and bench_fsdp.py)."""
import socket

import torch.multiprocessing as mp


def spawn(worker, world, args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(world, port, args), nprocs=world, start_method="fork")
