// zw_nccl_api_overhead — what NCCL's C API layer (libzwnccl) costs per call over zerowire's own C++ API.
//
// One rank (world size 1), host memory, tiny counts: each iteration issues one operation and waits for it, through
// zw::all_reduce / zw::all_gather + Work::wait, then through ncclAllReduce / ncclAllGather (which wait for host
// memory before returning). Both run the same zerowire operation underneath, so the difference is the API layer:
// argument checks, cudaPointerGetAttributes on each buffer, the operation record, the pending-work bookkeeping.
// Rounds alternate between the two APIs and the best round of each is reported (the VM's noise only adds time).
// Usage: zw_nccl_api_overhead [-n ITERS] [-r ROUNDS] [-c COUNT] [-a both|zw|nccl]. Validates both results before
// timing. -a runs one API's loops only: under `valgrind --tool=callgrind --separate-threads=yes` the calling thread's
// instruction count at two ITERS gives instructions per call, which a loaded machine does not disturb.
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
  std::string apis = "both";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "-n")) iters = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "-r")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "-c")) count = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "-a")) apis = argv[i + 1];
  }
  auto zc = zw::Communicator::create(zw::make_memory_store(), 0, 1);
  if (!zc.ok()) return std::fprintf(stderr, "%s\n", zc.status().to_string().c_str()), 1;
  ncclUniqueId id;
  ncclComm_t nc = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&nc, 1, id, 0) != ncclSuccess)
    return std::fprintf(stderr, "nccl init: %s\n", ncclGetLastError(nullptr)), 1;

  std::vector<float> in(count, 3.0f), out(count, 0.0f);
  zw::CollectiveOptions o;
  o.input = zw::MemRef::host(in.data(), count * 4);
  o.output = zw::MemRef::host(out.data(), count * 4);
  o.count = count;
  struct Case {
    const char* name;
    std::function<bool()> zw_call, nccl_call;
  };
  std::vector<Case> cases = {
      {"all_reduce",
       [&] {
         auto w = zw::all_reduce(**zc, o);
         return w.ok() && w->wait().ok();
       },
       [&] { return ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, nc, nullptr) == ncclSuccess; }},
      {"all_gather",
       [&] {
         auto w = zw::all_gather(**zc, o);
         return w.ok() && w->wait().ok();
       },
       [&] { return ncclAllGather(in.data(), out.data(), count, ncclFloat, nc, nullptr) == ncclSuccess; }},
  };
  std::printf("# zw_nccl_api_overhead: world size 1, host memory, %zu float(s), %d calls x %d rounds (best round)\n",
              count, iters, rounds);
  std::printf("# %-12s %14s %14s %14s %14s\n", "op", "zw_ns/call", "nccl_ns/call", "overhead_ns", "nccl_calls/s");
  for (const Case& c : cases) {
    std::fill(out.begin(), out.end(), 0.0f);
    if (!c.zw_call() || out[count - 1] != 3.0f) return std::fprintf(stderr, "%s: wrong zw result\n", c.name), 1;
    std::fill(out.begin(), out.end(), 0.0f);
    if (!c.nccl_call() || out[count - 1] != 3.0f) return std::fprintf(stderr, "%s: wrong nccl result\n", c.name), 1;
    double zw_best = 1e300, nccl_best = 1e300;
    for (int r = 0; r < rounds; ++r) {
      if (apis != "nccl") zw_best = std::min(zw_best, best_ns_per_call(iters, c.zw_call));
      if (apis != "zw") nccl_best = std::min(nccl_best, best_ns_per_call(iters, c.nccl_call));
    }
    std::printf("  %-12s %14.1f %14.1f %14.1f %14.0f\n", c.name, zw_best, nccl_best, nccl_best - zw_best,
                1e9 / nccl_best);
  }
  ncclCommDestroy(nc);
  return 0;
}
