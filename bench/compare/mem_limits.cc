// mem_limits: this machine's single-thread memory limits, the ceiling a one-copy host collective can reach.
// memcpy (c = a) and a += b (float32, the reduction inner loop) on pre-faulted, huge-page-advised buffers,
// best of several runs, in GB/s (10^9 bytes/s) of the destination's bytes per second; the memory traffic is
// twice that for memcpy (read + write) and three times for a += b (two reads + write). Also two threads copying
// at once, each its own buffers: the memory system's share per rank when both ranks of an all-gather copy.
//
// Then the inter-process ceilings (ipc_limits.h): process_vm_readv from another process, streaming and with a
// cache-sized block reused (as a 2-rank all-gather of 1 MiB reuses its 512 KiB blocks), beside memcpy with the
// same pattern; one loopback TCP stream, one way and both ways at once (streamed, and a short cache-resident one).
//
// Output (one line each, parsed by report.py): limit <name> <bytes> <best GB/s>, names memcpy, a+=b, cma,
// memcpy-2threads (per thread, both copying at once), memcpy-cached, cma-cached, memcpy-cached-2M, cma-cached-2M
// (bytes = the block), tcp-lo, tcp-lo-2way, tcp-lo-2way-cached. A probe that cannot run prints nothing.
// Non-goals: STREAM with more threads than the two ranks of a 2-rank collective, NUMA placement.
#include <sys/mman.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ipc_limits.h"

namespace {

float* alloc_prefaulted(size_t bytes, float value) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, bytes, MADV_HUGEPAGE);
  float* f = static_cast<float*>(p);
  std::fill(f, f + bytes / sizeof(float), value);
  return f;
}

// Kept out of line so the compiler cannot fold repeated runs; vectorized by -O3 -march=native.
__attribute__((noinline)) void add_into(float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

// Two threads, each copying its own `bytes` at the same moment (as the two ranks of an all-gather do), best of
// `runs`; GB/s copied per thread, or -1 when the buffers cannot be allocated.
double memcpy_two_threads_gbps(size_t bytes, int runs) {
  float* bufs[4];
  for (float*& b : bufs)
    if (!(b = alloc_prefaulted(bytes, 1.0f))) return -1;
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    std::barrier start(2);
    double secs[2] = {0, 0};
    auto copy = [&](int t) {
      start.arrive_and_wait();
      auto t0 = std::chrono::steady_clock::now();
      std::memcpy(bufs[2 * t], bufs[2 * t + 1], bytes);
      secs[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    std::thread other(copy, 1);
    copy(0);
    other.join();
    best = std::min(best, std::max(secs[0], secs[1]));
  }
  for (float* b : bufs) munmap(b, bytes);
  return bytes / best / 1e9;
}

template <typename F>
double best_seconds(int runs, F&& body) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    body();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  int runs = argc > 2 ? std::atoi(argv[2]) : 7;
  if (mib == 0 || runs <= 0) {
    std::fprintf(stderr, "usage: mem_limits [MiB (256)] [runs (7)]\n");
    return 2;
  }
  const size_t bytes = mib << 20, n = bytes / sizeof(float);
  float* a = alloc_prefaulted(bytes, 0.0f);
  float* b = alloc_prefaulted(bytes, 1.0f);
  float* c = alloc_prefaulted(bytes, 2.0f);
  if (!a || !b || !c) {
    std::fprintf(stderr, "mem_limits: cannot allocate 3 x %zu MiB\n", mib);
    return 1;
  }
  double copy_s = best_seconds(runs, [&] { std::memcpy(c, a, bytes); });
  double add_s = best_seconds(runs, [&] { add_into(a, b, n); });
  if (a[n / 2] != static_cast<float>(runs) || c[n / 3] != 0.0f) {  // keeps both loops observable, checks them
    std::fprintf(stderr, "mem_limits: wrong result (a=%g c=%g)\n", a[n / 2], c[n / 3]);
    return 1;
  }
  std::printf("limit memcpy %zu %.3f\n", bytes, bytes / copy_s / 1e9);
  std::printf("limit a+=b %zu %.3f\n", bytes, bytes / add_s / 1e9);
  if (double two = memcpy_two_threads_gbps(bytes, runs); two > 0)
    std::printf("limit memcpy-2threads %zu %.3f\n", bytes, two);
  auto report = [](const char* name, size_t size, double gbps) {
    if (gbps > 0) std::printf("limit %s %zu %.3f\n", name, size, gbps);
    else std::fprintf(stderr, "mem_limits: the %s probe could not run\n", name);
  };
  constexpr size_t kBlock = 512 << 10;
  char* dst = reinterpret_cast<char*>(c);
  report("cma", bytes, cma_read_gbps(bytes, bytes, runs, dst));
  report("memcpy-cached", kBlock, memcpy_chunked_gbps(bytes, kBlock, runs, reinterpret_cast<const char*>(a), dst));
  report("cma-cached", kBlock, cma_read_gbps(bytes, kBlock, runs, dst));
  // The block of a 4 MiB 2-rank all-gather: the kernel's per-call cost is spread over 4x the bytes.
  constexpr size_t kBigBlock = 2 << 20;
  report("memcpy-cached-2M", kBigBlock,
         memcpy_chunked_gbps(bytes, kBigBlock, runs, reinterpret_cast<const char*>(a), dst));
  report("cma-cached-2M", kBigBlock, cma_read_gbps(bytes, kBigBlock, runs, dst));
  // tcp: 1 MiB calls; the two-way stream from and into buffers of 64 MiB (what a large all-gather streams from
  // memory), and the cached case a 4 MiB 2-rank all-gather sees: 2 MiB each way, from and into 2 MiB buffers, best
  // of 256K and 1M calls and of 10x the runs (a short transfer's best varies more).
  constexpr size_t kMiB = 1 << 20;
  report("tcp-lo", bytes, tcp_loopback_gbps(bytes, kMiB, kMiB, runs, false));
  report("tcp-lo-2way", bytes, tcp_loopback_gbps(bytes, kMiB, std::min(bytes, 64 * kMiB), runs, true));
  report("tcp-lo-2way-cached", 2 * kMiB,
         std::max(tcp_loopback_gbps(2 * kMiB, 256 << 10, 2 * kMiB, 10 * runs, true),
                  tcp_loopback_gbps(2 * kMiB, kMiB, 2 * kMiB, 10 * runs, true)));
  return 0;
}
