// zw_cuda_issue_cost — what it costs the calling thread to *issue* one device-memory operation, and what the CUDA
// calls an issue path is made of cost on this machine: the floor under zerowire's and NCCL's per-call cost.
//
// Rows (ns per call on the calling thread, best of ROUNDS rounds of ITERS calls; device memory, a non-blocking stream,
// drained every 256 calls so the queue never fills, as zw_nccl_api_overhead -m device does):
//   primitives   cudaGetDevice, cudaSetDevice (same device), cudaPointerGetAttributes, cudaEventRecord (timing on,
//                timing off), cudaEventQuery (pending event), cudaStreamWaitEvent, an empty kernel (8-byte and 1 KiB
//                parameters: the direct kernel's DirectArgs is ~0.8 KiB), cudaMemcpyAsync of 4 bytes device to device,
//                that copy followed by a cudaEventRecord (what a world-size-1 operation queues: its copy and its
//                completion event)
//   zerowire     zw::all_reduce / zw::all_gather of one float at world size 1 (zerowire's own C++ API), on a
//                communicator with monitoring on (the default) and on one with it off (CommConfig::monitor = 0): the
//                difference is the device records' share of the issue cost; all_reduce in place, which copies
//                nothing: the bookkeeping alone (completion event, Work, record)
//   nccl         ncclAllReduce / ncclAllGather of one float at world size 1 through the libnccl this program was linked
//                with (the system NCCL: the anchor), when built with it (ZW_HAVE_NCCL)
// Usage: zw_cuda_issue_cost [-n ITERS] [-r ROUNDS]. Exit 77 without a GPU. Nothing is asserted: it measures.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "zerowire/communicator.h"
#if ZW_HAVE_NCCL
#include <nccl.h>
#endif

namespace {

struct Big {
  char bytes[1024];
};

__global__ void empty_small(int) {}
// Holds the stream for about `cycles` clock cycles, so that an event behind it stays pending while it is queried.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
__global__ void empty_big(Big) {}

using Clock = std::chrono::steady_clock;

// Best ns per call over `rounds` rounds of `iters` calls; `drain` runs every 256 calls and between rounds.
double best_ns(int iters, int rounds, const std::function<bool()>& call, const std::function<void()>& drain) {
  double best = 1e300;
  for (int r = 0; r < rounds; ++r) {
    drain();
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (!call()) {
        std::fprintf(stderr, "call %d failed: %s\n", i, cudaGetErrorString(cudaGetLastError()));
        std::exit(1);
      }
      if ((i & 255) == 255) drain();
    }
    best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - start).count() / iters);
  }
  drain();
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20000, rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "-n")) iters = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "-r")) rounds = std::atoi(argv[i + 1]);
  }
  int device = -1;
  float *in = nullptr, *out = nullptr;
  cudaStream_t stream = nullptr;
  if (cudaGetDevice(&device) != cudaSuccess || cudaMalloc(&in, 64) != cudaSuccess || cudaMalloc(&out, 64) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    return std::fprintf(stderr, "needs a GPU: %s\n", cudaGetErrorString(cudaGetLastError())), 77;
  cudaMemset(in, 0, 64);
  cudaEvent_t timed = nullptr, untimed = nullptr, pending = nullptr;
  cudaEventCreate(&timed);
  cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&pending, cudaEventDisableTiming);
  auto drain = [&] { cudaStreamSynchronize(stream); };
  auto ok = [](cudaError_t e) { return e == cudaSuccess; };
  Big big{};
  struct Row {
    std::string name;
    std::function<bool()> call;
  };
  std::vector<Row> rows = {
      {"cudaGetDevice",
       [&] {
         int d = 0;
         return ok(cudaGetDevice(&d));
       }},
      {"cudaSetDevice (same)", [&] { return ok(cudaSetDevice(device)); }},
      {"cudaPointerGetAttributes",
       [&] {
         cudaPointerAttributes a{};
         return ok(cudaPointerGetAttributes(&a, in));
       }},
      {"cudaEventRecord (timing)", [&] { return ok(cudaEventRecord(timed, stream)); }},
      {"cudaEventRecord (no timing)", [&] { return ok(cudaEventRecord(untimed, stream)); }},
      {"cudaStreamWaitEvent", [&] { return ok(cudaStreamWaitEvent(stream, untimed, 0)); }},
      {"kernel, 8-byte params",
       [&] {
         empty_small<<<1, 32, 0, stream>>>(0);
         return ok(cudaGetLastError());
       }},
      {"kernel, 1 KiB params",
       [&] {
         empty_big<<<1, 32, 0, stream>>>(big);
         return ok(cudaGetLastError());
       }},
      {"cudaMemcpyAsync 4 B D2D", [&] { return ok(cudaMemcpyAsync(out, in, 4, cudaMemcpyDeviceToDevice, stream)); }},
      {"cudaMemcpyAsync 4 B + cudaEventRecord",
       [&] {
         return ok(cudaMemcpyAsync(out, in, 4, cudaMemcpyDeviceToDevice, stream)) &&
                ok(cudaEventRecord(untimed, stream));
       }},
  };
  auto zc = zw::Communicator::create(zw::make_memory_store(), 0, 1);
  if (!zc.ok()) return std::fprintf(stderr, "%s\n", zc.status().to_string().c_str()), 1;
  zw::CommConfig unmonitored;
  unmonitored.monitor = 0;
  auto zq = zw::Communicator::create(zw::make_memory_store(), 0, 1, unmonitored);
  if (!zq.ok()) return std::fprintf(stderr, "%s\n", zq.status().to_string().c_str()), 1;
  zw::CollectiveOptions o;
  o.input = zw::MemRef{in, 4, zw::MemKind::kCudaDevice, device};
  o.output = zw::MemRef{out, 4, zw::MemKind::kCudaDevice, device};
  o.count = 1;
  o.stream = stream;
  rows.push_back({"zw::all_reduce (world 1)", [&] { return zw::all_reduce(**zc, o).ok(); }});
  rows.push_back({"zw::all_gather (world 1)", [&] { return zw::all_gather(**zc, o).ok(); }});
  rows.push_back({"zw::all_reduce (world 1, monitor off)", [&] { return zw::all_reduce(**zq, o).ok(); }});
  zw::CollectiveOptions in_place = o;  // nothing to copy: what is left is the bookkeeping (event, Work, record)
  in_place.input = o.output;
  rows.push_back({"zw::all_reduce in place (world 1)", [&] { return zw::all_reduce(**zc, in_place).ok(); }});
  rows.push_back({"zw::all_reduce in place (world 1, mon. off)", [&] { return zw::all_reduce(**zq, in_place).ok(); }});
  rows.push_back({"zw::all_gather (world 1, monitor off)", [&] { return zw::all_gather(**zq, o).ok(); }});
#if ZW_HAVE_NCCL
  ncclComm_t nc = nullptr;
  if (ncclCommInitAll(&nc, 1, &device) != ncclSuccess) return std::fprintf(stderr, "ncclCommInitAll failed\n"), 1;
  int version = 0;
  ncclGetVersion(&version);
  const std::string tag = " (NCCL " + std::to_string(version) + ")";
  rows.push_back({"ncclAllReduce" + tag, [&] {
                    return ncclAllReduce(in, out, 1, ncclFloat, ncclSum, nc, stream) == ncclSuccess;
                  }});
  rows.push_back({"ncclAllGather" + tag, [&] { return ncclAllGather(in, out, 1, ncclFloat, nc, stream) == ncclSuccess; }});
#endif
  std::printf("# zw_cuda_issue_cost: ns per call on the calling thread, best of %d rounds of %d calls; device memory,\n"
              "# one float, a non-blocking stream drained every 256 calls\n",
              rounds, iters);
  {  // cudaEventQuery of an event still pending: behind a kernel that spins for ~50 ms
    spin<<<1, 1, 0, stream>>>(100'000'000LL);
    cudaEventRecord(pending, stream);
    const auto start = Clock::now();
    int n = 0;
    while (n < iters && cudaEventQuery(pending) == cudaErrorNotReady) ++n;
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count() / std::max(n, 1);
    std::printf("  %-44s %10.1f  (%d queries while pending)\n", "cudaEventQuery (pending)", ns, n);
    drain();
  }
  for (const Row& row : rows) {
    std::printf("  %-44s %10.1f\n", row.name.c_str(), best_ns(iters, rounds, row.call, drain));
  }
#if ZW_HAVE_NCCL
  ncclCommDestroy(nc);
#endif
  cudaFree(in);
  cudaFree(out);
  cudaStreamDestroy(stream);
  return 0;
}
