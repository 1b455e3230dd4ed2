"""CUDA Work semantics of the zerowire backend (issue 18), as ProcessGroupNCCL's, in real processes sharing a GPU:
  order     a collective issued on a stream runs after what was enqueued there before it (its input is written
            behind a ~1 s GPU sleep; a collective that did not wait would read zeros);
  no sync   issuing it and wait() return while the GPU is still busy (an event recorded after them has not
            completed, is_completed() is False): wait() makes the current stream wait, not the host;
  streams   wait() on another stream than the issuing one orders that stream after the collective;
  alive     the tensors of an async collective stay allocated while it is pending even when the caller dropped every
            reference (torch.cuda.memory_allocated), and the result is right when the caller reuses the memory;
  futures   get_future() carries the outputs, then() runs after the collective (CUDA-aware future).
Every check compares values or CUDA states, never durations. python test_cuda_semantics.py [--world N]
[--device cuda|cpu]; on CPU tensors (a dry run without GPU) only the value checks run.
"""
import sys

import torch
import torch.distributed as dist

from zw_testing import finish, main_world, run

SLEEP_CYCLES = 2_000_000_000  # torch.cuda._sleep: ~1 s at the H200's ~2 GHz (longer when ranks share the GPU)
N = 1 << 20


class Checks:
    def __init__(self, ctx):
        self.ctx, self.failures, self.total = ctx, [], 0
        self.cuda = ctx.device == "cuda"

    def expect(self, name, ok, detail=""):
        self.total += 1
        if not ok:
            self.failures.append(f"{name}{': ' + detail if detail else ''}")

    def busy(self):
        """Enqueues a ~1 s GPU sleep on the current stream, then lines the ranks up on the host (so no rank's GPU
        finished its sleep before the others issue)."""
        if self.cuda:
            torch.cuda._sleep(SLEEP_CYCLES)
        dist.barrier(group=self.ctx.gloo)

    def still_busy(self):
        """True while the current stream has not reached this point (its sleep is still running)."""
        if not self.cuda:
            return False
        e = torch.cuda.Event()
        e.record()
        return not e.query()


def order_and_wait(c):
    """A collective issued on a side stream behind a sleep; waited on from the default stream."""
    ctx = c.ctx
    side = torch.cuda.Stream() if c.cuda else None
    want = float(sum(r + 1 for r in range(ctx.world)))
    with torch.cuda.stream(side) if c.cuda else _null():
        x = torch.zeros(N, device=ctx.device)
        c.busy()
        x.fill_(ctx.rank + 1)  # behind the sleep: read too early, x is still zeros
        work = dist.all_reduce(x, group=ctx.zw, async_op=True)
        if c.cuda:
            c.expect("issue returned while the GPU is busy", c.still_busy())
    work.wait()  # on the default stream now
    y = x * 1  # on the default stream: must see the reduced x
    if c.cuda:
        c.expect("wait() returned without synchronising the host", c.still_busy())
        c.expect("is_completed() is False while the collective is pending", not work.is_completed())
        torch.cuda.synchronize()
        c.expect("is_completed() after the stream finished", work.is_completed())
    c.expect("all_reduce after a write behind a sleep (stream order)", bool((y == want).all()),
             f"got {y[:4].tolist()}, want {want}")


def settle(c):
    """Lets the backend release the works of earlier cases: it prunes completed works when the next operation is
    issued, so a case that counts memory must not see an earlier case's tensors freed in the middle."""
    if c.cuda:
        torch.cuda.synchronize()
    dist.all_reduce(torch.zeros(1, device=c.ctx.device), group=c.ctx.zw)
    if c.cuda:
        torch.cuda.synchronize()


def warm_up(c):
    """The first device-memory operation of a communicator creates its GPU engine and maps the peers' memory, and the
    first use of a kernel loads it (CUDA_MODULE_LOADING=LAZY), either of which may wait for the GPU, as
    ProcessGroupNCCL's lazy communicator creation does: run every operation and kernel of the checks once first."""
    x = torch.ones(N, device=c.ctx.device)
    y = x * 1
    dist.all_reduce(y, group=c.ctx.zw)
    out = torch.empty(N * c.ctx.world, device=c.ctx.device)
    dist.all_gather_into_tensor(out, x, group=c.ctx.zw)
    dist.reduce_scatter_tensor(x, out, group=c.ctx.zw)
    dist.all_reduce(y, group=c.ctx.zw, async_op=True).get_future().then(lambda f: f.value()[0] * 2).wait()
    settle(c)


def kept_alive(c):
    """An async all_gather_into_tensor whose tensors the caller drops at once; the memory is reused meanwhile."""
    ctx = c.ctx
    settle(c)
    c.busy()
    before = torch.cuda.memory_allocated() if c.cuda else 0

    def issue():
        inp = torch.full((N,), float(ctx.rank + 1), device=ctx.device)
        out = torch.empty(N * ctx.world, device=ctx.device)
        return dist.all_gather_into_tensor(out, inp, group=ctx.zw, async_op=True)

    work = issue()
    if c.cuda:
        held = torch.cuda.memory_allocated() - before
        # settle()'s one-float work (a 512-byte block) may be released meanwhile; a dropped 4 MiB tensor may not
        c.expect("the dropped tensors stay allocated while the collective is pending",
                 held >= 4 * N * (1 + ctx.world) - 4096, f"{held} bytes held, want {4 * N * (1 + ctx.world)}")
    junk = [torch.full((N,), -7.0, device=ctx.device) for _ in range(2 + ctx.world)]  # would take freed blocks
    out = work.get_future().wait()[0]
    want = torch.cat([torch.full((N,), float(r + 1)) for r in range(ctx.world)])
    c.expect("all_gather_into_tensor with dropped tensors", torch.equal(out.cpu(), want))
    del junk
    # A work nobody holds: the backend keeps it (and its tensors) until it completed.
    t = torch.full((N,), float(ctx.rank + 1), device=ctx.device)
    dist.all_reduce(t, group=ctx.zw, async_op=True)
    if c.cuda:
        torch.cuda.synchronize()
    else:
        dist.barrier(group=ctx.zw)  # zerowire runs operations in issue order: the all_reduce completed before it
    want_sum = float(sum(r + 1 for r in range(ctx.world)))
    c.expect("all_reduce whose work was dropped", bool((t == want_sum).all()))


def futures(c):
    ctx = c.ctx
    x = torch.full((N,), float(ctx.rank + 1), device=ctx.device)
    c.busy()
    fut = dist.all_reduce(x, group=ctx.zw, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    got = fut.wait()
    want = 2.0 * sum(r + 1 for r in range(ctx.world))
    c.expect("get_future().then() after the collective", bool((got == want).all()), f"got {got[:4].tolist()}")
    rs_in = torch.arange(N * ctx.world, dtype=torch.float32, device=ctx.device)
    rs_out = torch.empty(N, device=ctx.device)
    c.busy()
    w = dist.reduce_scatter_tensor(rs_out, rs_in, group=ctx.zw, async_op=True)
    value = w.get_future().wait()
    c.expect("reduce_scatter_tensor's future holds its output", len(value) == 1 and value[0] is not None and
             value[0].data_ptr() == rs_out.data_ptr())
    want_rs = torch.arange(N * ctx.rank, N * (ctx.rank + 1), dtype=torch.float32) * ctx.world
    c.expect("reduce_scatter_tensor through the future", torch.equal(rs_out.cpu(), want_rs))


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def semantics(ctx):
    c = Checks(ctx)
    for case in (warm_up, order_and_wait, kept_alive, futures):
        try:
            case(c)
        except Exception as e:  # noqa: BLE001 (reported with the case's name; the ranks stay in step)
            c.failures.append(f"{case.__name__} raised {type(e).__name__}: {e}")
    if c.cuda:
        torch.cuda.synchronize()
    finish(ctx, c.failures, c.total)


if __name__ == "__main__":
    device = "cuda" if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cuda" else "cpu"
    run(main_world(), semantics, device=device, timeout_s=60)
