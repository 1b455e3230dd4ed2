"""Failures as a PyTorch user expects them from the zerowire backend, in real processes:
  dead peer     - a rank exits; the survivors' next collective raises DistBackendError naming that rank and its
                  host, within the group's timeout;
  stuck peer    - a rank does not join; the others raise within the group's timeout, naming it;
  mismatch      - ranks issue different collectives (op, size, dtype): every rank raises, naming the ranks;
  bad arguments - wrong sizes, list lengths, mixed dtypes or devices (where there is a GPU), non-contiguous
                  tensors raise ValueError from zerowire on the calling rank before anything is sent, and the
                  group stays usable.
python test_failures.py --case dead|stuck|mismatch|badargs
"""
import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

from zw_testing import run

TIMEOUT_S = 6


def expect_raises(what, fn, *words):
    """Runs fn; it must raise, and the message must contain every word. Returns the seconds it took."""
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the type is checked by the caller where it matters)
        msg = str(e)
        missing = [w for w in words if w not in msg]
        if missing:
            raise AssertionError(f"{what}: the error does not name {missing}: {msg}") from e
        return time.monotonic() - t0, e
    raise AssertionError(f"{what}: no exception")


def dead(ctx):
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if ctx.rank == ctx.world - 1:
        os._exit(0)  # dies without a word (exit code 0, so the launcher does not stop the others)
    took, e = expect_raises("collective with a dead peer", lambda: dist.all_reduce(t), f"rank {ctx.world - 1}",
                            socket.gethostname())
    assert isinstance(e, dist.DistBackendError), f"expected DistBackendError, got {type(e).__name__}: {e}"
    assert took < TIMEOUT_S + 5, f"the dead peer was reported after {took:.1f} s (timeout {TIMEOUT_S} s)"
    print(f"rank {ctx.rank}: dead peer reported after {took:.2f} s: {e}", flush=True)
    os._exit(0)  # the group is aborted; skip the orderly shutdown, which would wait for the dead rank


def stuck(ctx):
    t = torch.ones(1024)
    dist.all_reduce(t)
    if ctx.rank == 1:
        time.sleep(TIMEOUT_S + 4)  # misses the deadline, then finds the group aborted
        try:
            dist.all_reduce(t)
        except Exception:  # noqa: BLE001
            pass
        os._exit(0)
    took, e = expect_raises("collective with a stuck peer", lambda: dist.all_reduce(t), "rank 1")
    assert TIMEOUT_S - 1 <= took < TIMEOUT_S + 5, f"the stuck peer was reported after {took:.1f} s " \
                                                  f"(timeout {TIMEOUT_S} s)"
    print(f"rank {ctx.rank}: stuck peer reported after {took:.2f} s: {e}", flush=True)
    os._exit(0)


def mismatch(ctx):
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    cases = {
        "op": lambda r: (dist.all_reduce(torch.ones(64), group=g) if r == 0
                         else dist.all_gather_into_tensor(torch.ones(64 * ctx.world), torch.ones(64), group=g)),
        "size": lambda r: dist.all_reduce(torch.ones(64 + r), group=g),
        "dtype": lambda r: dist.all_reduce(torch.ones(64, dtype=torch.float32 if r == 0 else torch.float64), group=g),
    }
    for name, call in cases.items():
        g = dist.new_group(backend="zerowire", timeout=timeout)  # a mismatch aborts its group: one per case
        dist.all_reduce(torch.ones(4), group=g)
        took, e = expect_raises(f"mismatched {name}", lambda: call(ctx.rank), "rank 0", "rank 1")
        assert took < TIMEOUT_S + 5, f"mismatched {name} reported after {took:.1f} s"
        if ctx.rank == 0:
            print(f"mismatched {name}: {e}", flush=True)
    dist.barrier(group=ctx.gloo)
    os._exit(0)  # the mismatched groups are aborted


def badargs(ctx):
    x = torch.ones(8)
    cases = {
        "wrong output size": lambda: dist.all_gather_into_tensor(torch.empty(8 * ctx.world + 1), x),
        "wrong input size": lambda: dist.reduce_scatter_tensor(torch.empty(8), torch.ones(8 * ctx.world - 1)),
        "mixed dtypes (list; torch's own check)": lambda: dist.all_gather([torch.empty(8) for _ in range(ctx.world - 1)] +
                                                [torch.empty(8, dtype=torch.float64)], x),
        "non-contiguous": lambda: dist.all_reduce(torch.ones(16)[::2]),
        "mixed dtypes (tensor)": lambda: dist.all_gather_into_tensor(torch.empty(8 * ctx.world, dtype=torch.float64),
                                                                    x),
        "wrong list length": lambda: dist.all_gather([torch.empty(8)], x),
    }
    if torch.cuda.is_available():
        cases["mixed devices"] = lambda: dist.all_gather_into_tensor(torch.empty(8 * ctx.world, device="cuda"), x)
    for name, call in cases.items():
        expect_raises(name, call, *(() if "torch's own" in name else ("zerowire",)))
    t = torch.full((8,), float(ctx.rank))
    dist.all_reduce(t)  # nothing was sent by the refused calls: the group still works
    want = float(sum(range(ctx.world)))
    assert torch.equal(t, torch.full((8,), want)), f"all_reduce after refused calls: {t}"
    if ctx.rank == 0:
        print(f"{len(cases)} bad calls refused before sending; the group still works", flush=True)


if __name__ == "__main__":
    case = sys.argv[sys.argv.index("--case") + 1]
    fn = {"dead": dead, "stuck": stuck, "mismatch": mismatch, "badargs": badargs}[case]
    world = 3 if case == "dead" else 2
    run(world, fn, timeout_s=TIMEOUT_S, store="file" if case == "badargs" else "tcp")
