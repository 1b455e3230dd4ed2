"""The collectives matrix: every torch.distributed operation the zerowire backend maps, against Gloo's results on
the same inputs, in real processes (python test_collectives.py --world N [--device cuda]).

--part collectives|p2p runs the cases without / with zerowire's point-to-point batches (batch_isend_irecv,
all_to_all_single with split sizes, send/recv, gather, scatter, all_to_all with lists); the default runs both. Coverage is chosen to stay quick on two cores: every operation x every dtype at sizes 0, 1, 7 (odd) and 1031;
a size sweep (2 .. 262147 elements, across zerowire's eager/tree/ring thresholds) for float32; int8/bool through
the data-movement operations (moved as bytes). Cases alternate sync/async (wait() and get_future().wait()) and
in-place/out-of-place. Inputs are small integers, so every sum, product, min and max is exact in every dtype and
the comparison is exact; averages and pre-multiplied sums by 1/3 compare within the dtype's rounding (RTOL).
all_to_all_single (equal blocks and split sizes), batch_isend_irecv (a ring exchange), send/recv, gather, scatter
and all_to_all with lists (tensors of different sizes per rank) run for every dtype and size too, against Gloo's.
The reference is Gloo's all_reduce / all_gather / broadcast / all_to_all (on host copies) on the inputs widened to float64 or int64 (exact for
these values; Gloo lacks AVG and PREMUL_SUM, and some reductions for 16-bit floats), cast back to the dtype.
"""
import sys

import torch
import torch.distributed as dist

from zw_testing import DTYPES, FLOAT_DTYPES, check, finish, main_world, run, values

SIZES = (0, 1, 7, 1031)
SWEEP = (2, 3, 64, 4097, 65537, 262147)
OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
       "product": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.AVG}


def wide(dtype):
    return torch.float64 if dtype.is_floating_point else torch.int64


class Matrix:
    def __init__(self, ctx):
        self.ctx = ctx
        self.failures = []
        self.total = 0
        self.case = 0

    def expect(self, name, got, want, exact=True, rtol=None):
        self.total += 1
        check(self.failures, name, got, want, exact, rtol)

    def wait(self, work, outputs):
        """Sync calls return None; async ones are waited on through wait() or, every other time, the future; every
        fourth case asks for the future only after wait() (the backend makes a host work's future on demand)."""
        if work is None:
            return
        if self.case % 4 == 1:
            work.wait()
        if self.case % 4 in (1, 3):
            got = work.get_future().wait()
            if not isinstance(got, list) or any(a.data_ptr() != b.data_ptr() for a, b in zip(got, outputs)):
                self.failures.append(f"case {self.case}: the future's value is not the outputs")
        else:
            work.wait()

    def premul_factor(self, dtype, factor):
        """The factor the backend is handed for a PREMUL_SUM over `dtype` (the zerowire backend: the factor itself)."""
        return factor

    # --- references through Gloo -------------------------------------------------------------------------------
    def ref_reduce(self, x, op, factor=None):
        c = self.ctx
        x = x.cpu()  # Gloo runs on host copies (CUDA tensors too)
        t = x.to(wide(x.dtype))
        if factor is not None:
            factor = self.premul_factor(x.dtype, factor)
            t = (x * factor).to(x.dtype).to(t.dtype)
        gloo_op = dist.ReduceOp.SUM if op in ("sum", "avg", "premul") else OPS[op]
        dist.all_reduce(t, op=gloo_op, group=c.gloo)
        if op == "avg":
            t = t / c.world
        return t.to(x.dtype)

    def ref_gather(self, x):
        c = self.ctx
        x = x.cpu()
        parts = [torch.empty_like(x) for _ in range(c.world)]
        dist.all_gather(parts, x, group=c.gloo)
        return torch.cat([p.reshape(-1) for p in parts])

    # --- cases -------------------------------------------------------------------------------------------------
    def all_reduce(self, dtype, n, op, factor=None):
        c, a = self.ctx, self.case % 2 == 1
        x = values((n,), dtype, ("ar", self.case), c.rank, device=c.device)
        t = x.clone()
        rop = dist._make_nccl_premul_sum(factor) if op == "premul" else OPS[op]
        self.wait(dist.all_reduce(t, op=rop, group=c.zw, async_op=a), [t])
        exact = op not in ("avg", "premul") or (op == "avg" and c.world in (2, 4)) or factor == 0.5
        self.expect(f"all_reduce {op} {dtype} n={n} async={a}", t, self.ref_reduce(x, op, factor), exact)

    def reduce(self, dtype, n, op):
        c, a = self.ctx, self.case % 2 == 1
        root = self.case % c.world
        x = values((n,), dtype, ("rd", self.case), c.rank, device=c.device)
        t = x.clone()
        self.wait(dist.reduce(t, dst=root, op=OPS[op], group=c.zw, async_op=a), [t])
        want = self.ref_reduce(x, op)
        if c.rank == root:
            self.expect(f"reduce {op} root={root} {dtype} n={n} async={a}", t, want)

    def broadcast(self, dtype, n):
        c, a = self.ctx, self.case % 2 == 1
        root = self.case % c.world
        x = values((n,), dtype, ("bc", self.case), c.rank, device=c.device)
        t = x.clone()
        self.wait(dist.broadcast(t, src=root, group=c.zw, async_op=a), [t])
        want = x.cpu().clone()
        dist.broadcast(want, src=root, group=c.gloo)
        self.expect(f"broadcast root={root} {dtype} n={n} async={a}", t, want)

    def all_gather(self, dtype, n):
        c, a = self.ctx, self.case % 2 == 1
        x = values((n,), dtype, ("ag", self.case), c.rank, device=c.device)
        outs = [torch.full_like(x, 7) for _ in range(c.world)]
        self.wait(dist.all_gather(outs, x, group=c.zw, async_op=a), outs)
        self.expect(f"all_gather(list) {dtype} n={n} async={a}", torch.cat(outs), self.ref_gather(x))

    def all_gather_into_tensor(self, dtype, n):
        c, a, in_place = self.ctx, self.case % 2 == 1, self.case % 3 == 0
        x = values((n,), dtype, ("agt", self.case), c.rank, device=c.device)
        out = torch.full((n * c.world,), 7, dtype=dtype, device=c.device)
        inp = out[c.rank * n:(c.rank + 1) * n] if in_place else x
        if in_place:
            inp.copy_(x)
        self.wait(dist.all_gather_into_tensor(out, inp, group=c.zw, async_op=a), [out])
        self.expect(f"all_gather_into_tensor {dtype} n={n} async={a} in_place={in_place}", out, self.ref_gather(x))

    def reduce_scatter(self, dtype, n, op):
        c, a = self.ctx, self.case % 2 == 1
        ins = [values((n,), dtype, ("rs", self.case, r), c.rank, device=c.device) for r in range(c.world)]
        out = torch.full((n,), 7, dtype=dtype, device=c.device)
        self.wait(dist.reduce_scatter(out, ins, op=OPS[op], group=c.zw, async_op=a), [out])
        want = self.ref_reduce(torch.cat(ins), op)[c.rank * n:(c.rank + 1) * n]
        self.expect(f"reduce_scatter(list) {op} {dtype} n={n} async={a}", out, want, op != "avg" or c.world != 3)

    def reduce_scatter_tensor(self, dtype, n, op, factor=None):
        c, a, in_place = self.ctx, self.case % 2 == 1, self.case % 3 == 0
        x = values((n * c.world,), dtype, ("rst", self.case), c.rank, device=c.device)
        inp = x.clone()
        out = inp[c.rank * n:(c.rank + 1) * n] if in_place else torch.full((n,), 7, dtype=dtype, device=c.device)
        rop = dist._make_nccl_premul_sum(factor) if op == "premul" else OPS[op]
        self.wait(dist.reduce_scatter_tensor(out, inp, op=rop, group=c.zw, async_op=a), [out])
        want = self.ref_reduce(x, op, factor)[c.rank * n:(c.rank + 1) * n]
        exact = op not in ("avg", "premul") or (op == "avg" and c.world in (2, 4)) or factor == 0.5
        self.expect(f"reduce_scatter_tensor {op} {dtype} n={n} async={a} in_place={in_place}", out, want, exact)

    def coalesced(self, dtype, n):
        """all_gather_into_tensor, reduce_scatter_tensor and all_reduce through _coalescing_manager, and
        all_reduce_coalesced: one work for several operations."""
        c, a = self.ctx, self.case % 2 == 1
        dev = torch.device(c.device)
        xs = [values((n,), dtype, ("co", self.case, i), c.rank, device=c.device) for i in range(2)]
        outs = [torch.empty(n * c.world, dtype=dtype, device=c.device) for _ in xs]
        with dist._coalescing_manager(group=c.zw, device=dev, async_ops=a) as cm:
            for o, x in zip(outs, xs):
                dist.all_gather_into_tensor(o, x, group=c.zw)
        if a:
            cm.wait()
        for i, (o, x) in enumerate(zip(outs, xs)):
            self.expect(f"coalesced all_gather_into_tensor[{i}] {dtype} n={n} async={a}", o, self.ref_gather(x))
        big = [values((n * c.world,), dtype, ("cors", self.case, i), c.rank, device=c.device) for i in range(2)]
        rs = [torch.empty(n, dtype=dtype, device=c.device) for _ in big]
        with dist._coalescing_manager(group=c.zw, device=dev, async_ops=a) as cm:
            for o, x in zip(rs, big):
                dist.reduce_scatter_tensor(o, x, group=c.zw)
        if a:
            cm.wait()
        for i, (o, x) in enumerate(zip(rs, big)):
            want = self.ref_reduce(x, "sum")[c.rank * n:(c.rank + 1) * n]
            self.expect(f"coalesced reduce_scatter_tensor[{i}] {dtype} n={n} async={a}", o, want)
        ts = [x.clone() for x in xs]
        with dist._coalescing_manager(group=c.zw, device=dev, async_ops=a) as cm:
            for t in ts:
                dist.all_reduce(t, group=c.zw)
        if a:
            cm.wait()
        for i, (t, x) in enumerate(zip(ts, xs)):
            self.expect(f"coalesced all_reduce[{i}] {dtype} n={n} async={a}", t, self.ref_reduce(x, "sum"))
        ts = [x.clone() for x in xs]
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            w = dist.all_reduce_coalesced(ts, group=c.zw, async_op=a)
        if a:
            w.wait()
        for i, (t, x) in enumerate(zip(ts, xs)):
            self.expect(f"all_reduce_coalesced[{i}] {dtype} n={n} async={a}", t, self.ref_reduce(x, "sum"))

    def all_to_all(self, dtype, n, uneven):
        """all_to_all_single: equal blocks (zerowire's all_to_all), or split sizes (a send/recv batch)."""
        c, a = self.ctx, self.case % 2 == 1
        if uneven:
            in_splits = [(c.rank + p) % 3 + n % 2 for p in range(c.world)]
            out_splits = [(p + c.rank) % 3 + n % 2 for p in range(c.world)]  # what rank p sends here
            x = values((sum(in_splits), 3), dtype, ("a2a", self.case), c.rank, device=c.device)
            out = torch.full((sum(out_splits), 3), 7, dtype=dtype, device=c.device)
        else:
            in_splits = out_splits = None
            x = values((n * c.world,), dtype, ("a2a", self.case), c.rank, device=c.device)
            out = torch.full_like(x, 7)
        self.wait(dist.all_to_all_single(out, x, out_splits, in_splits, group=c.zw, async_op=a), [out])
        want = torch.empty_like(out, device="cpu")
        dist.all_to_all_single(want, x.cpu(), out_splits, in_splits, group=c.gloo)
        self.expect(f"all_to_all_single {dtype} n={n} uneven={uneven} async={a}", out, want)

    def gather(self, dtype, n):
        """gather and scatter (zerowire's gather/scatter, on send_recv) against Gloo's, root moving with the case."""
        c, a = self.ctx, self.case % 2 == 1
        root = self.case % c.world
        x = values((n,), dtype, ("ga", self.case), c.rank, device=c.device)
        outs = [torch.full_like(x, 7) for _ in range(c.world)] if c.rank == root else None
        self.wait(dist.gather(x, outs, dst=root, group=c.zw, async_op=a), outs or [])
        want = [torch.empty_like(x, device="cpu") for _ in range(c.world)] if c.rank == root else None
        dist.gather(x.cpu(), want, dst=root, group=c.gloo)
        if c.rank == root:
            self.expect(f"gather root={root} {dtype} n={n} async={a}", torch.cat(outs), torch.cat(want))

    def scatter(self, dtype, n):
        c, a = self.ctx, self.case % 2 == 1
        root = (self.case + 1) % c.world
        ins = [values((n,), dtype, ("sc", self.case, p), c.rank, device=c.device) for p in range(c.world)]
        out = torch.full((n,), 7, dtype=dtype, device=c.device)
        self.wait(dist.scatter(out, ins if c.rank == root else None, src=root, group=c.zw, async_op=a), [out])
        want = torch.empty_like(out, device="cpu")
        dist.scatter(want, [t.cpu() for t in ins] if c.rank == root else None, src=root, group=c.gloo)
        self.expect(f"scatter root={root} {dtype} n={n} async={a}", out, want)

    def all_to_all_list(self, dtype, n):
        """all_to_all with lists of tensors of different sizes per rank; Gloo's all_to_all_single with split sizes
        on the concatenation is the reference (Gloo has no list form)."""
        c, a = self.ctx, self.case % 2 == 1
        in_sizes = [n + (c.rank + p) % 3 for p in range(c.world)]
        out_sizes = [n + (p + c.rank) % 3 for p in range(c.world)]  # what rank p sends here
        ins = [values((k,), dtype, ("a2l", self.case, p), c.rank, device=c.device) for p, k in enumerate(in_sizes)]
        outs = [torch.full((k,), 7, dtype=dtype, device=c.device) for k in out_sizes]
        self.wait(dist.all_to_all(outs, ins, group=c.zw, async_op=a), outs)
        want = torch.empty(sum(out_sizes), dtype=dtype)
        dist.all_to_all_single(want, torch.cat([t.cpu() for t in ins]), out_sizes, in_sizes, group=c.gloo)
        self.expect(f"all_to_all(list) {dtype} n={n} async={a}", torch.cat(outs), want)

    def p2p(self, dtype, n):
        """A ring exchange in one batch_isend_irecv (both directions at once), then plain send/recv from rank 0."""
        c = self.ctx
        right, left = (c.rank + 1) % c.world, (c.rank - 1) % c.world
        x = values((n,), dtype, ("p2p", self.case), c.rank, device=c.device)
        got = torch.full_like(x, 7)
        ops = [dist.P2POp(dist.isend, x, right, group=c.zw), dist.P2POp(dist.irecv, got, left, group=c.zw)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        self.expect(f"batch_isend_irecv ring {dtype} n={n}", got,
                    values((n,), dtype, ("p2p", self.case), left, device=c.device))
        if c.rank == 0:
            for p in range(1, c.world):
                dist.send(x, p, group=c.zw)
        else:
            got = torch.full_like(x, 7)
            dist.recv(got, 0, group=c.zw)
            self.expect(f"send/recv from 0 {dtype} n={n}", got,
                        values((n,), dtype, ("p2p", self.case), 0, device=c.device))

    def refused(self):
        """What zerowire cannot do raises on the calling rank, before anything is sent; the group stays usable."""
        c = self.ctx
        for what, call in (
            ("avg of int32", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32, device=c.device),
                                                     op=dist.ReduceOp.AVG, group=c.zw)),
            ("sum of int8", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int8, device=c.device), group=c.zw)),
            ("bitwise and", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32, device=c.device),
                                                    op=dist.ReduceOp.BAND, group=c.zw)),
            ("recv from any source", lambda: dist.recv(torch.ones(4, device=c.device), group=c.zw)),
        ):
            self.total += 1
            try:
                call()
                self.failures.append(f"{what}: no exception")
            except (ValueError, TypeError, NotImplementedError, RuntimeError) as e:
                if "zerowire" not in str(e):
                    self.failures.append(f"{what}: exception does not come from zerowire: {e}")
        self.all_reduce(torch.float32, 5, "sum")  # still works

    # --- the plan ----------------------------------------------------------------------------------------------
    def plan(self):
        for dtype in DTYPES:
            floating = dtype in FLOAT_DTYPES
            for n in SIZES:
                for op in ("sum", "min", "max", "product") + (("avg", "premul") if floating else ()):
                    yield self.all_reduce, (dtype, n, op) + ((1 / 3 if n % 2 else 0.5,) if op == "premul" else ())
                yield self.reduce, (dtype, n, "sum" if floating else "max")
                yield self.broadcast, (dtype, n)
                yield self.all_gather, (dtype, n)
                yield self.all_gather_into_tensor, (dtype, n)
                yield self.reduce_scatter, (dtype, n, "sum")
                for op in ("sum", "max") + (("avg", "premul") if floating else ()):
                    yield self.reduce_scatter_tensor, (dtype, n, op) + ((0.5,) if op == "premul" else ())
                yield self.all_to_all, (dtype, n, False)
                yield self.all_to_all, (dtype, n, True)
                yield self.p2p, (dtype, n)
                yield self.gather, (dtype, n)
                yield self.scatter, (dtype, n)
                yield self.all_to_all_list, (dtype, n)
        for dtype in (torch.int8, torch.bool):
            for n in (0, 7, 1031):
                yield self.broadcast, (dtype, n)
                yield self.all_gather, (dtype, n)
                yield self.all_gather_into_tensor, (dtype, n)
        for n in SWEEP:
            yield self.all_reduce, (torch.float32, n, "sum")
            yield self.all_gather_into_tensor, (torch.float32, n)
            yield self.reduce_scatter_tensor, (torch.float32, n, "sum")
            yield self.broadcast, (torch.float32, n)
        for dtype in (torch.float32, torch.bfloat16):
            for n in (1, 1031):
                yield self.coalesced, (dtype, n)
        yield self.refused, ()


# Cases that go through zerowire's point-to-point batches (send_recv): their own CTest entries (torch_p2p_n*).
P2P_CASES = ("p2p", "all_to_all_uneven", "gather", "scatter", "all_to_all_list")


def matrix(ctx, part="all"):
    m = Matrix(ctx)
    for fn, args in m.plan():
        name = fn.__name__ + ("_uneven" if fn.__name__ == "all_to_all" and args[2] else "")
        if (part == "p2p") != (name in P2P_CASES) and part != "all":
            m.case += 1
            continue
        fn(*args)
        m.case += 1
    for _ in range(3):
        dist.barrier(group=ctx.zw)
    finish(ctx, m.failures, m.total)


if __name__ == "__main__":
    device = "cuda" if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cuda" else "cpu"
    part = sys.argv[sys.argv.index("--part") + 1] if "--part" in sys.argv else "all"  # all | collectives | p2p
    run(main_world(), matrix, part, device=device, timeout_s=120)
