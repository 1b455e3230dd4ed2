// mem_limits: this machine's single-thread memory limits, the ceiling a one-copy host collective can reach.
// memcpy (c = a) and a += b (float32, the reduction inner loop) on pre-faulted, huge-page-advised buffers,
// best of several runs, in GB/s (10^9 bytes/s) of the destination's bytes per second; the memory traffic is
// twice that for memcpy (read + write) and three times for a += b (two reads + write).
//
// Then the inter-process ceilings (ipc_limits.h): process_vm_readv from another process, streaming and with a
// cache-sized block reused (as a 2-rank all-gather of 1 MiB reuses its 512 KiB blocks), beside memcpy with the
// same pattern; one loopback TCP stream, one way and both ways at once (streamed, and a short cache-resident one).
//
// Output (one line each, parsed by report.py): limit <name> <bytes> <best GB/s>, names memcpy, a+=b, cma,
// memcpy-cached, cma-cached (bytes = the block), tcp-lo, tcp-lo-2way, tcp-lo-2way-cached. A probe that cannot run
// prints nothing.
// Non-goals: multi-threaded STREAM, NUMA placement.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
  auto report = [](const char* name, size_t size, double gbps) {
    if (gbps > 0) std::printf("limit %s %zu %.3f\n", name, size, gbps);
    else std::fprintf(stderr, "mem_limits: the %s probe could not run\n", name);
  };
  constexpr size_t kBlock = 512 << 10;
  char* dst = reinterpret_cast<char*>(c);
  report("cma", bytes, cma_read_gbps(bytes, bytes, runs, dst));
  report("memcpy-cached", kBlock, memcpy_chunked_gbps(bytes, kBlock, runs, reinterpret_cast<const char*>(a), dst));
  report("cma-cached", kBlock, cma_read_gbps(bytes, kBlock, runs, dst));
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
