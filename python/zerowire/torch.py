"""The `zerowire` torch.distributed backend.

Importing this module registers the backend for CPU and CUDA tensors::

    import torch.distributed as dist
    import zerowire.torch  # noqa: F401
    dist.init_process_group("zerowire")            # or "cpu:zerowire,cuda:zerowire", or "cpu:gloo,cuda:zerowire"

Each process group gets one zerowire communicator, bootstrapped over the store torch hands the backend (no second
port) with the group's timeout as its per-operation deadline. The backend itself is C++ (zerowire._C).
"""
import datetime

import torch  # loads libtorch before zerowire._C, which links it
import torch.distributed as dist

from . import _C

BACKEND_NAME = "zerowire"


def _create_backend(store, rank: int, world_size: int, timeout: datetime.timedelta):
    return _C.create_backend(store, rank, world_size, timeout.total_seconds())


if BACKEND_NAME not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["cpu", "cuda"])

__all__ = ["BACKEND_NAME"]
