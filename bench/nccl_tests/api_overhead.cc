// zw_nccl_api_overhead — what NCCL's C API layer (libzwnccl) costs per call over zerowire's own C++ API.
//
// One rank (world size 1), host memory, tiny counts: each iteration issues one operation and waits for it, through
// zw::all_reduce / zw::all_gather + Work::wait, then through ncclAllReduce / ncclAllGather (which wait for host
// memory before returning). Both run the same zerowire operation underneath, so the difference is the API layer:
// argument checks, cudaPointerGetAttributes on each buffer, the operation record, the pending-work bookkeeping.
// Rounds alternate between the two APIs and the best round of each is reported (the VM's noise only adds time).
// -m device (needs a GPU): device memory on a non-blocking stream instead; each call only enqueues (NCCL's semantics:
// the C API keeps the Work for ncclCommGetAsyncError, the C++ loop drops it), and both loops drain the stream every
// 256 calls so that the queue never fills. The difference is again the API layer, now with real pointer queries.
// Usage: zw_nccl_api_overhead [-n ITERS] [-r ROUNDS] [-c COUNT] [-a both|zw|nccl] [-m host|device]. Validates both
// results before timing. -a runs one API's loops only: under `valgrind --tool=callgrind --separate-threads=yes` the
// calling thread's instruction count at two ITERS gives instructions per call, which a loaded machine does not
// disturb.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "nccl.h"
#include "zerowire/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

double best_ns_per_call(int iters, const std::function<bool()>& call) {
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i)
    if (!call()) {
      std::fprintf(stderr, "call %d failed\n", i);
      std::exit(1);
    }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 200000, rounds = 5;
  size_t count = 1;
  std::string apis = "both", mem = "host";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "-n")) iters = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "-r")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "-c")) count = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "-a")) apis = argv[i + 1];
    if (!std::strcmp(argv[i], "-m")) mem = argv[i + 1];
  }
  const bool device = mem == "device";
  const size_t bytes = count * sizeof(float);
  std::vector<float> host_in(count, 3.0f), host_out(count, 0.0f);
  float* in = host_in.data();
  float* out = host_out.data();
  cudaStream_t stream = nullptr;
  int ordinal = -1;
  if (device) {
    if (cudaGetDevice(&ordinal) != cudaSuccess || cudaMalloc(&in, bytes) != cudaSuccess ||
        cudaMalloc(&out, bytes) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
      return std::fprintf(stderr, "-m device needs a GPU: %s\n", cudaGetErrorString(cudaGetLastError())), 77;
    cudaMemcpy(in, host_in.data(), bytes, cudaMemcpyHostToDevice);
  }
  auto zc = zw::Communicator::create(zw::make_memory_store(), 0, 1);
  if (!zc.ok()) return std::fprintf(stderr, "%s\n", zc.status().to_string().c_str()), 1;
  ncclUniqueId id;
  ncclComm_t nc = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&nc, 1, id, 0) != ncclSuccess)
    return std::fprintf(stderr, "nccl init: %s\n", ncclGetLastError(nullptr)), 1;

  zw::CollectiveOptions o;
  const zw::MemKind kind = device ? zw::MemKind::kCudaDevice : zw::MemKind::kHost;
  o.input = zw::MemRef{in, bytes, kind, ordinal};
  o.output = zw::MemRef{out, bytes, kind, ordinal};
  o.count = count;
  o.stream = stream;
  // Host memory: both APIs wait for each call. Device memory: both only enqueue, and drain every 256 calls.
  int issued = 0;
  auto drained = [&](bool ok) {
    if (device && ok && ++issued % 256 == 0) ok = cudaStreamSynchronize(stream) == cudaSuccess;
    return ok;
  };
  auto zw_done = [&](zw::Result<zw::Work> w) { return drained(w.ok() && (device || w->wait().ok())); };
  struct Case {
    const char* name;
    std::function<bool()> zw_call, nccl_call;
  };
  std::vector<Case> cases = {
      {"all_reduce", [&] { return zw_done(zw::all_reduce(**zc, o)); },
       [&] { return drained(ncclAllReduce(in, out, count, ncclFloat, ncclSum, nc, stream) == ncclSuccess); }},
      {"all_gather", [&] { return zw_done(zw::all_gather(**zc, o)); },
       [&] { return drained(ncclAllGather(in, out, count, ncclFloat, nc, stream) == ncclSuccess); }},
  };
  // The result of one call (copied back from the device), after zeroing the output.
  auto check = [&](const std::function<bool()>& call) {
    if (device) {
      cudaMemsetAsync(out, 0, bytes, stream);
    } else {
      std::fill(host_out.begin(), host_out.end(), 0.0f);
    }
    if (!call()) return false;
    if (device && (cudaMemcpyAsync(host_out.data(), out, bytes, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
                   cudaStreamSynchronize(stream) != cudaSuccess))
      return false;
    return host_out[count - 1] == 3.0f;
  };
  std::printf("# zw_nccl_api_overhead: world size 1, %s memory, %zu float(s), %d calls x %d rounds (best round)%s\n",
              mem.c_str(), count, iters, rounds, device ? ", issue only, stream drained every 256 calls" : "");
  std::printf("# %-12s %14s %14s %14s %14s\n", "op", "zw_ns/call", "nccl_ns/call", "overhead_ns", "nccl_calls/s");
  for (const Case& c : cases) {
    if (!check(c.zw_call)) return std::fprintf(stderr, "%s: wrong zw result\n", c.name), 1;
    if (!check(c.nccl_call))
      return std::fprintf(stderr, "%s: wrong nccl result: %s\n", c.name, ncclGetLastError(nc)), 1;
    double zw_best = 1e300, nccl_best = 1e300;
    for (int r = 0; r < rounds; ++r) {
      if (apis != "nccl") zw_best = std::min(zw_best, best_ns_per_call(iters, c.zw_call));
      if (device) cudaStreamSynchronize(stream);
      if (apis != "zw") nccl_best = std::min(nccl_best, best_ns_per_call(iters, c.nccl_call));
      if (device) cudaStreamSynchronize(stream);
    }
    std::printf("  %-12s %14.1f %14.1f %14.1f %14.0f  (%s memory)\n", c.name, zw_best, nccl_best, nccl_best - zw_best,
                1e9 / nccl_best, mem.c_str());
  }
  ncclCommDestroy(nc);
  if (device) {
    cudaStreamSynchronize(stream);
    cudaFree(in);
    cudaFree(out);
    cudaStreamDestroy(stream);
  }
  return 0;
}
