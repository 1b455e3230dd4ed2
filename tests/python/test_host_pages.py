"""Huge pages under CPU destination tensors (python/csrc/host_pages.h), in real processes over shm:
  fresh      a torch.empty output used once stays on 4 KiB pages (no advice before a range's third use);
  reused     a touched (torch.full) output is on huge pages after its third call (MADV_COLLAPSE);
  off        with zerowire._C._huge_page_advice(False) a touched output stays on 4 KiB pages after three calls;
and every result equals the expected gather. Pages are read from /proc/self/smaps (AnonHugePages of the mappings
over the tensor's 2 MiB-aligned units). Exits 77 (skipped, with the reason) where transparent huge pages are off or
MADV_COLLAPSE is missing (Linux < 6.1). python test_host_pages.py [--world N]
"""
import ctypes
import re
import sys

import torch
import torch.distributed as dist

import zerowire._C

from zw_testing import finish, main_world, run

MIB = 1 << 20
HUGE = 2 * MIB


def aligned_bytes(t):
    p, n = t.data_ptr(), t.nbytes
    return max(0, (p + n) // HUGE * HUGE - (p + HUGE - 1) // HUGE * HUGE)


def huge_bytes(t):
    """Bytes of AnonHugePages in the mappings that overlap t's 2 MiB-aligned units."""
    p, n = t.data_ptr(), t.nbytes
    start, end = (p + HUGE - 1) // HUGE * HUGE, (p + n) // HUGE * HUGE
    total, overlap = 0, False
    for line in open("/proc/self/smaps"):
        m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if m:
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            overlap = lo < end and hi > start
        elif overlap and line.startswith("AnonHugePages:"):
            total += int(line.split()[1]) * 1024
    return total


def skip_reason():
    try:
        mode = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return "no /sys/kernel/mm/transparent_hugepage (a kernel without transparent huge pages)"
    if "[never]" in mode:
        return "transparent huge pages are off ([never])"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    probe = torch.ones(4 * MIB // 4)
    a = (probe.data_ptr() + HUGE - 1) // HUGE * HUGE
    if libc.madvise(a, HUGE, 25) != 0 and ctypes.get_errno() == 22:  # MADV_COLLAPSE unknown: EINVAL
        return "madvise(MADV_COLLAPSE) is not supported (Linux < 6.1)"
    return None


def pages(ctx):
    failures, total = [], 0
    per = 4 * MIB // 4  # 4 MiB per rank: the output spans several aligned 2 MiB units at every world size
    x = torch.full((per,), float(ctx.rank + 1))
    want = torch.cat([torch.full((per,), float(r + 1)) for r in range(ctx.world)])

    def gather(out, times):
        for _ in range(times):
            out.fill_(-1)
            dist.all_gather_into_tensor(out, x, group=ctx.zw)
        return torch.equal(out, want)

    def expect(name, ok, detail=""):
        nonlocal total
        total += 1
        if not ok:
            failures.append(f"{name}{': ' + detail if detail else ''}")

    fresh = torch.empty(per * ctx.world)
    dist.all_gather_into_tensor(fresh, x, group=ctx.zw)
    expect("output used once: result", torch.equal(fresh, want))
    expect("output used once stays on 4 KiB pages", huge_bytes(fresh) == 0, f"{huge_bytes(fresh)} bytes")

    reused = torch.full((per * ctx.world,), 0.0)
    expect("touched output: results of three calls", gather(reused, 3))
    # After the third call every aligned unit is huge (one unit of slack: a unit whose pages a peer's write had
    # pinned at that moment stays small). Before it, khugepaged may already have collapsed some units of the range
    # the first call advised, so only the end state is checked.
    want_huge = aligned_bytes(reused) - HUGE
    expect("touched output on huge pages after its third call", huge_bytes(reused) >= want_huge,
           f"{huge_bytes(reused)} bytes huge of {aligned_bytes(reused)}")

    previous = zerowire._C._huge_page_advice(False)
    try:
        off = torch.full((per * ctx.world,), 0.0)
        expect("advice off: results", gather(off, 3))
        expect("advice off: the output stays on 4 KiB pages", huge_bytes(off) == 0, f"{huge_bytes(off)} bytes")
    finally:
        zerowire._C._huge_page_advice(previous)
    finish(ctx, failures, total)


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(77)
    run(main_world(), pages)
