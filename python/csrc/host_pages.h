// host_pages.h — huge pages under the CPU tensors that peers write into: the torch backend's answer to torch's
// 4 KiB pages.
//
// zerowire's shm transport writes into another process's ordinary memory with process_vm_writev, which pins every
// destination page on every call and copies at about half speed on 4 KiB pages; first touches cost 12-20 µs per
// 4 KiB page on the development VM. torch's CPU allocator hands out 4 KiB-paged memory (where transparent huge pages
// are `madvise`, as on most distributions), so the same collective was 25-60 % slower on torch's tensors than on
// zerowire's own benchmark buffers (docs/PERF.md). For a destination tensor that torch's CPU allocator made, at
// least one whole 2 MiB-aligned unit long, on its 2 MiB-aligned units:
//   - madvise(MADV_HUGEPAGE) the first time the range is seen: pages not touched yet (torch.empty outputs, FSDP2's
//     all-gather buffers) fault in as 2 MiB pages when the peers write them;
//   - madvise(MADV_COLLAPSE) (Linux >= 6.1) once, on the range's third use: pages already touched move onto huge
//     pages (a one-time copy of the range, 2-100 ms per 16 MiB on the development VM), so buffers a program reuses
//     run as zerowire's own benchmark buffers do.
// Contents never change. Failures (older kernels, THP disabled, no huge page free, pages pinned by a transfer in
// flight) leave the pages as they were and are not reported. A process-wide table (bounded, cleared when full)
// remembers ranges; a range torch freed and handed out again keeps its entry, which at worst skips the advice.
// Thread-safe. Non-goals: CUDA tensors, memory torch's CPU allocator did not make (numpy, files, zerowire arenas),
// tensors only read locally (inputs), huge pages for the unaligned head and tail of a range.
#pragma once

#include <ATen/ATen.h>

namespace zwt {

// Advises huge pages for `t` as above, if it is a CPU tensor of torch's CPU allocator with a whole 2 MiB unit.
void prefer_huge_pages(const at::Tensor& t);

// Benchmark switch (zerowire._C._huge_page_advice): turns the advice on or off for this process; returns the
// previous setting. On by default.
bool set_huge_page_advice(bool enabled);

}  // namespace zwt
