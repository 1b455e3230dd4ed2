// nccl-tests-style collective benchmark driver shared by zw_all_gather_perf, zw_reduce_scatter_perf and
// zw_all_reduce_perf.
//
// Flags and columns follow nccl-tests: -b/-e min/max bytes, -f step factor (or -i step bytes), -n iterations,
// -w warm-up iterations, -c check (validate each size once before timing), -d dtype (or all), -o op (or all),
// -r root, -R 1 to allocate the buffers with zw::mem_alloc (nccl-tests: ncclMemAlloc + registration); the table
// prints size, count, type, redop, root and, for out-of-place and in-place, time (us), algbw and busbw (GB/s) and
// #wrong. Time is the mean over iterations, averaged over ranks (nccl-tests -a 1).
// Rank discovery comes from the environment (run under zwrun); without a launcher it runs as one rank.
// Buffers are allocated once at the largest size, huge-page advised and pre-faulted (-R 1: by zw::mem_alloc).
#pragma once

namespace zw::bench {

enum class CollKind { kAllGather, kReduceScatter, kAllReduce };

int run_collective_perf(int argc, char** argv, CollKind kind);

}  // namespace zw::bench
