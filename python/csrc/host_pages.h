// host_pages.h — huge pages under the CPU tensors that peers write into: the torch backend's answer to torch's
// 4 KiB pages.
//
// zerowire's shm transport writes into another process's ordinary memory with process_vm_writev, which pins every
// destination page on every call and copies at about half speed on 4 KiB pages. torch's CPU allocator hands out
// 4 KiB-paged memory (where transparent huge pages are `madvise`, as on most distributions), so the same collective
// was 25-60 % slower on torch's tensors than on huge-page ones (docs/PERF.md). A destination tensor that torch's CPU
// allocator made, with at least one whole 2 MiB-aligned unit, is counted by its aligned range; at the range's third
// use its units get madvise(MADV_HUGEPAGE) and madvise(MADV_COLLAPSE) (Linux >= 6.1): the pages move onto huge pages
// once (a copy of the range, 2-100 ms per 16 MiB on the loaded development VM), and buffers a program reuses run as
// huge-page buffers do from then on. Nothing happens at the first two uses: a buffer made fresh for each call
// (at a new address) is left alone — advising those at first use measured no gain or a loss (huge-page faults
// with compaction on a loaded host, docs/PERF.md).
// Contents never change. Failures (older kernels, THP disabled, no huge page free, pages pinned by a transfer in
// flight) leave the pages as they were and are not reported. A process-wide table (bounded, cleared when full)
// remembers ranges; a range torch freed and handed out again keeps its count, so it is collapsed at most once.
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
