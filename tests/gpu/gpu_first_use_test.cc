// tests/gpu/gpu_first_use_test.cc — the first launch of every collective kernel while a peer's kernel already spins
// on the same GPU: the hang of CUDA's lazy kernel loading (gpu_comm.h).
//
// Two ranks run as threads on GPU 0 (one context), each with its own non-blocking stream, and run for every dtype and
// op a reduce-scatter and an all-reduce, and for every dtype an all-gather. Rank 0's input starts one element past a
// 16-byte boundary, so on the ring kernels (ZW_CUDA_ALGO=ring) the ranks launch different kernels of one operation
// (rank 0 the scalar one, rank 1 the vector one), each for the first time: whichever launches second launches a
// kernel that is not loaded yet while the other's kernel spins, waiting for it. Lazily loaded, that launch can wait
// for the context to go idle, which waits for the spinning kernel: without the preload of GpuComm::create the case
// ends in the communicators' timeout (10 s) — the hang seen on an H200 at the first ring reduce-scatter with prod.
// The results are checked too: at two ranks the ring order and the rank order combine the same two values, and sum,
// prod, min and max are commutative, so the reference is the host kernels' a op b (then the scale, for avg).
//
// It tests the fix only as the first collectives of its process (an earlier test in the same process loads kernels):
// ctest zw_gpu_first_use_ring_test runs it alone, in a fresh process, with ZW_CUDA_ALGO=ring and
// CUDA_MODULE_LOADING=LAZY. In the whole binary it still checks first-use results on whichever algorithm is chosen.
// Skips with "no CUDA device" where no GPU is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/knobs.h"
#include "kernels/reduce.h"
#include "tests/gpu/gpu_test_util.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw {
namespace {

constexpr int kRanks = 2;
constexpr size_t kCount = 4096;   // elements per rank's block: every block offset stays 16-byte aligned
constexpr double kTimeoutS = 10;  // the communicators' timeout: a hung case fails after it

enum class Kind { kReduceScatter, kAllReduce, kAllGather };

struct FirstUseCase {
  Kind kind;
  DataType dt;
  ReduceOp op;
};

std::string describe(const FirstUseCase& c) {
  static const char* kinds[] = {"reduce_scatter", "all_reduce", "all_gather"};
  return std::string(kinds[static_cast<int>(c.kind)]) + " " + dtype_name(c.dt) + " " + reduce_op_name(c.op);
}

// Per dtype: each op's reduce-scatter first (its kernels' first launch), then its all-reduce; then the all-gather.
std::vector<FirstUseCase> first_use_cases() {
  std::vector<FirstUseCase> cases;
  for (int d = 0; d < kNumDataTypes; ++d) {
    const auto dt = static_cast<DataType>(d);
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto op = static_cast<ReduceOp>(o);
      if (!reduce_op_supported(dt, op)) continue;
      cases.push_back({Kind::kReduceScatter, dt, op});
      cases.push_back({Kind::kAllReduce, dt, op});
    }
    cases.push_back({Kind::kAllGather, dt, ReduceOp::kSum});
  }
  return cases;
}

size_t in_count(const FirstUseCase& c) { return c.kind == Kind::kReduceScatter ? kCount * kRanks : kCount; }
size_t out_count(const FirstUseCase& c) { return c.kind == Kind::kAllGather ? kCount * kRanks : kCount; }

// Random finite values (the top exponent bit cleared: no inf or NaN).
std::vector<std::byte> random_input(DataType dt, size_t count, uint64_t seed) {
  const size_t es = dtype_size(dt);
  std::vector<std::byte> out(count * es);
  std::mt19937_64 rng(seed);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  const bool floating =
      dt == DataType::kFloat32 || dt == DataType::kFloat16 || dt == DataType::kBFloat16 || dt == DataType::kFloat64;
  if (floating)
    for (size_t i = 0; i < count; ++i) out[i * es + es - 1] &= std::byte{0xBF};
  return out;
}

// Rank r's expected output from both ranks' inputs.
std::vector<std::byte> expected(const FirstUseCase& c, int r, const std::vector<std::byte> (&inputs)[kRanks]) {
  const size_t es = dtype_size(c.dt), block = kCount * es;
  if (c.kind == Kind::kAllGather) {
    std::vector<std::byte> out(inputs[0].begin(), inputs[0].end());
    out.insert(out.end(), inputs[1].begin(), inputs[1].end());
    return out;
  }
  const size_t offset = c.kind == Kind::kReduceScatter ? r * block : 0;
  std::vector<std::byte> out(block);
  kernels::reduce(c.dt, c.op, out.data(), inputs[0].data() + offset, inputs[1].data() + offset, kCount);
  if (c.op == ReduceOp::kAvg) kernels::scale(c.dt, out.data(), out.data(), kCount, 1.0 / kRanks);
  return out;
}

// One rank's device memory: rank 0's input starts one element past the allocation (not 16-byte aligned).
struct RankMemory {
  cudaStream_t stream = nullptr;
  std::byte* in_base = nullptr;
  std::byte* out = nullptr;
};

// Runs case c on rank r; "" or what went wrong.
std::string run_case(Communicator& comm, const RankMemory& m, const FirstUseCase& c,
                     const std::vector<std::byte> (&inputs)[kRanks]) {
  const int r = comm.rank();
  const size_t es = dtype_size(c.dt), ib = in_count(c) * es, ob = out_count(c) * es;
  std::byte* in = m.in_base + (r == 0 ? es : 0);
  if (cudaMemcpyAsync(in, inputs[r].data(), ib, cudaMemcpyHostToDevice, m.stream) != cudaSuccess)
    return "upload failed";
  if (cudaMemsetAsync(m.out, 0xA5, ob, m.stream) != cudaSuccess) return "poison failed";
  CollectiveOptions o;
  o.input = MemRef{in, ib, MemKind::kCudaDevice, 0};
  o.output = MemRef{m.out, ob, MemKind::kCudaDevice, 0};
  o.count = kCount;
  o.dtype = c.dt;
  o.op = c.op;
  o.stream = m.stream;
  Result<Work> w = c.kind == Kind::kReduceScatter ? reduce_scatter(comm, o)
                   : c.kind == Kind::kAllReduce   ? all_reduce(comm, o)
                                                  : all_gather(comm, o);
  if (!w.ok()) return "enqueue: " + w.status().to_string();
  std::vector<std::byte> got(ob);
  if (cudaMemcpyAsync(got.data(), m.out, ob, cudaMemcpyDeviceToHost, m.stream) != cudaSuccess ||
      cudaStreamSynchronize(m.stream) != cudaSuccess)
    return "download failed";
  Status st = w.value().wait(std::chrono::milliseconds(static_cast<int64_t>(3 * kTimeoutS * 1000)));
  if (!st.ok()) return "wait: " + st.to_string();
  const std::vector<std::byte> want = expected(c, r, inputs);
  for (size_t i = 0; i < ob; ++i)
    if (got[i] != want[i])
      return "first difference at byte " + std::to_string(i) + " of " + std::to_string(ob) + " (element " +
             std::to_string(i / es) + ")";
  return "";
}

TEST(GpuFirstUseTest, EveryKernelsFirstLaunchBesideASpinningPeerOnOneGpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<FirstUseCase> cases = first_use_cases();
  std::printf("[first-use] %zu cases, %d ranks on GPU 0, ZW_CUDA_ALGO=%s CUDA_MODULE_LOADING=%s\n", cases.size(),
              kRanks, knobs().cuda_algo.c_str(), gpu_test::env_or("CUDA_MODULE_LOADING", "(lazy)").c_str());
  std::fflush(stdout);
  const size_t max_bytes = (kCount * kRanks + 1) * sizeof(double);
  auto store = make_memory_store();
  std::string failures[kRanks];
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      RankMemory m;
      if (cudaSetDevice(0) != cudaSuccess ||
          cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking) != cudaSuccess ||
          cudaMalloc(&m.in_base, max_bytes) != cudaSuccess || cudaMalloc(&m.out, max_bytes) != cudaSuccess) {
        failures[r] = "setting up the stream and buffers failed";
        return;
      }
      CommConfig config;
      config.timeout_s = kTimeoutS;
      auto comm = Communicator::create(store, r, kRanks, config);
      if (!comm.ok()) {
        failures[r] = comm.status().to_string();
      } else {
        for (size_t i = 0; i < cases.size() && failures[r].empty(); ++i) {
          const FirstUseCase& c = cases[i];
          std::vector<std::byte> inputs[kRanks];
          for (int p = 0; p < kRanks; ++p) inputs[p] = random_input(c.dt, in_count(c), i * 131 + p);
          std::string err = run_case(*comm.value(), m, c, inputs);
          if (!err.empty()) failures[r] = "case " + std::to_string(i + 1) + " " + describe(c) + ": " + err;
        }
        comm.value().reset();
      }
      cudaFree(m.in_base);
      cudaFree(m.out);
      cudaStreamDestroy(m.stream);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
}

}  // namespace
}  // namespace zw
