// tests/gpu/gpu_collectives_test.cc — every collective on CUDA device memory against a host reference.
//
// Ranks run as threads of this process, each with its own communicator, stream and device (rank % GPUs), so one
// GPU runs worlds of 1 to 8 ranks and two GPUs exercise NVLink. Every case produces its input on the stream
// (an asynchronous device-to-device copy right before the collective), poisons the output, runs the collective
// on the same stream and reads the result back on it: a kernel not ordered after the copy would read stale input.
// Inputs are random finite values; the expected result is the left fold over ranks with the host kernels
// (zw::kernels::reduce, then scale for avg), which the GPU kernels match bit for bit. Also: in-place forms. The
// error paths, the IPC cache and ranks sharing a GPU are in gpu_collectives_errors_test.cc (same binary).
// The same binary runs again with ZW_CUDA_ALGO=ring (ctest zw_gpu_collectives_ring_test) for the ring kernels.
// Multi-process runs (real CUDA IPC) are covered by zw_gpu_coll_perf -c 1 under zwrun (gpu_ipc_perf_check).
// Skips with "no CUDA device" where no GPU is visible.
// Test-only switches (tools/gpu-check.sh sets them): ZW_TEST_WORLDS=1,2,3 runs only those worlds (the others skip);
// ZW_TEST_CASES=quick runs a subset of the cases (quick_case); ZW_TEST_TIMEOUT_S (default 60) is the communicators'
// timeout, so a stalled case fails after it; ZW_TEST_PROGRESS=1 prints a line per case (gpu_test_progress.h), which
// also prints one line per world and, whenever no case finishes for a while, where every rank is.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/gpu_test_progress.h"
#include "tests/gpu/gpu_test_util.h"
#include "kernels/reduce.h"
#include "common/knobs.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw {
namespace {

using gpu_test::CaseProgress;
using gpu_test::device_count;

// Before the first CUDA call: a hardware queue per rank stream even at 8 ranks on one GPU. Kernels of streams that
// share a queue run in issue order, so a rank's kernel queued behind a peer's kernel that spins waiting for it could
// not start (until that wait times out). The environment wins: CUDA_DEVICE_MAX_CONNECTIONS=8 tests the default.
[[maybe_unused]] const bool kMoreConnections = [] { return setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) == 0; }();

enum class Kind { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kReduce };
const char* kind_name(Kind k) {
  static const char* names[] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce"};
  return names[static_cast<int>(k)];
}

// Random finite values: the top exponent bit is cleared, so no inf or NaN (|x| < 2).
std::vector<std::byte> random_input(DataType dt, size_t count, uint64_t seed) {
  std::vector<std::byte> out(count * dtype_size(dt));
  std::mt19937_64 rng(seed);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  const size_t es = dtype_size(dt);
  for (size_t i = 0; i < count; ++i) {
    std::byte* e = out.data() + i * es;
    if (dt == DataType::kFloat32 || dt == DataType::kFloat16 || dt == DataType::kBFloat16 || dt == DataType::kFloat64)
      e[es - 1] &= std::byte{0xBF};
  }
  return out;
}

struct Case {
  Kind kind;
  DataType dt;
  ReduceOp op;
  size_t count;
  bool in_place;
  int root;
  double premul = 1.0;  // != 1: a pre-multiplied sum (always the direct kernel)
};

std::string describe(const Case& c) {
  return std::string(kind_name(c.kind)) + " " + dtype_name(c.dt) + " " + reduce_op_name(c.op) + " count " +
         std::to_string(c.count) + (c.in_place ? " in-place" : "") +
         (c.premul != 1.0 ? " premul " + std::to_string(c.premul) : "");
}

// Per-rank device buffers, allocated once at the largest size.
struct RankBuffers {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::byte* staging = nullptr;  // the input, uploaded before the case
  std::byte* in = nullptr;
  std::byte* out = nullptr;
  size_t bytes = 0;
};

size_t in_bytes(const Case& c, int n) {
  const size_t es = dtype_size(c.dt);
  return (c.kind == Kind::kReduceScatter ? c.count * n : c.count) * es;
}
size_t out_bytes(const Case& c, int n) {
  const size_t es = dtype_size(c.dt);
  return (c.kind == Kind::kAllGather ? c.count * n : c.count) * es;
}

// ZW_CUDA_ALGO=ring runs all-gather, and out-of-place reduce-scatter and all-reduce, on the ring kernels, whose
// sums fold in ring order: block b starts at rank b+1 and ends at rank b.
bool ring_mode() { return knobs().cuda_algo == "ring"; }

// The element range of rank r's part of an all-reduce (as the GPU path splits it: whole 16-byte vectors).
void part_of(int r, int n, size_t count, size_t elem, size_t* lo, size_t* hi) {
  const size_t unit = 16 / elem, units = (count + unit - 1) / unit;
  const size_t per = units / n, extra = units % n, ru = static_cast<size_t>(r);
  const size_t first = ru * per + std::min(ru, extra), last = first + per + (ru < extra ? 1 : 0);
  *lo = std::min(count, first * unit);
  *hi = std::min(count, last * unit);
}

// The expected output of rank r.
std::vector<std::byte> expected(const Case& c, int n, int r, const std::vector<std::vector<std::byte>>& inputs) {
  const size_t es = dtype_size(c.dt), block = c.count * es;
  const bool ring = ring_mode() && n > 1 && !c.in_place && c.premul == 1.0;
  // Folds inputs over [offset, offset + bytes) in rank order, or in ring order for block `ring_block`; a
  // pre-multiplied sum scales every input (rounded to the element type) before it is added.
  auto input = [&](int p, size_t offset, size_t bytes) {
    std::vector<std::byte> x(inputs[p].begin() + offset, inputs[p].begin() + offset + bytes);
    if (c.premul != 1.0) kernels::scale(c.dt, x.data(), x.data(), bytes / es, c.premul);
    return x;
  };
  auto fold = [&](size_t offset, size_t bytes, int ring_block) {
    const int first = ring_block < 0 ? 0 : (ring_block + 1) % n;
    std::vector<std::byte> acc = input(first, offset, bytes);
    const ReduceOp op = c.op == ReduceOp::kAvg ? ReduceOp::kSum : c.op;
    for (int k = 1; k < n; ++k)
      kernels::reduce(c.dt, op, acc.data(), acc.data(), input((first + k) % n, offset, bytes).data(), bytes / es);
    if (c.op == ReduceOp::kAvg) kernels::scale(c.dt, acc.data(), acc.data(), bytes / es, 1.0 / n);
    return acc;
  };
  switch (c.kind) {
    case Kind::kAllGather: {
      std::vector<std::byte> out;
      for (int p = 0; p < n; ++p) out.insert(out.end(), inputs[p].begin(), inputs[p].begin() + block);
      return out;
    }
    case Kind::kReduceScatter: return fold(r * block, block, ring ? r : -1);
    case Kind::kBroadcast: return inputs[c.root];
    case Kind::kReduce: return fold(0, block, -1);
    case Kind::kAllReduce: {
      if (!ring) return fold(0, block, -1);
      std::vector<std::byte> out;
      for (int b = 0; b < n; ++b) {
        size_t lo = 0, hi = 0;
        part_of(b, n, c.count, es, &lo, &hi);
        std::vector<std::byte> part = fold(lo * es, (hi - lo) * es, b);
        out.insert(out.end(), part.begin(), part.end());
      }
      return out;
    }
  }
  return {};
}

// Runs one case on rank r (telling `progress` each stage it enters); returns a failure description or "".
std::string run_case(Communicator& comm, RankBuffers& b, const Case& c,
                     const std::vector<std::vector<std::byte>>& inputs, CaseProgress& progress, double timeout_s) {
  const int n = comm.size(), r = comm.rank();
  progress.stage(r, CaseProgress::kIssue);
  const size_t es = dtype_size(c.dt), ib = in_bytes(c, n), ob = out_bytes(c, n);
  // In place: the input lives inside the output where the operation expects it.
  std::byte* in = b.in;
  std::byte* out = b.out;
  if (c.in_place) {
    if (c.kind == Kind::kAllGather) in = out + r * c.count * es;
    if (c.kind == Kind::kReduceScatter) out = in + r * c.count * es;
    if (c.kind == Kind::kAllReduce || c.kind == Kind::kBroadcast || c.kind == Kind::kReduce) in = out;
  }
  // Everything on the rank's (non-blocking) stream: a memset on the legacy stream could land after the copy.
  if (cudaMemcpyAsync(b.staging, inputs[r].data(), ib, cudaMemcpyHostToDevice, b.stream) != cudaSuccess)
    return "upload failed";
  if (cudaMemsetAsync(out, 0xA5, ob, b.stream) != cudaSuccess) return "poison failed";
  if (cudaMemcpyAsync(in, b.staging, ib, cudaMemcpyDeviceToDevice, b.stream) != cudaSuccess) return "copy failed";
  CollectiveOptions o;
  o.input = MemRef{in, ib, MemKind::kCudaDevice, b.device};
  o.output = MemRef{out, ob, MemKind::kCudaDevice, b.device};
  o.count = c.count;
  o.dtype = c.dt;
  o.op = c.op;
  o.root = c.root;
  o.stream = b.stream;
  o.premul = c.premul;
  Result<Work> w = c.kind == Kind::kAllGather       ? all_gather(comm, o)
                   : c.kind == Kind::kReduceScatter ? reduce_scatter(comm, o)
                   : c.kind == Kind::kAllReduce     ? all_reduce(comm, o)
                   : c.kind == Kind::kBroadcast     ? broadcast(comm, o)
                                                    : reduce(comm, o);
  if (!w.ok()) return "enqueue: " + w.status().to_string();
  progress.stage(r, CaseProgress::kDownload);  // a pageable read-back: returns when the collective has run
  std::vector<std::byte> got(ob);
  if (cudaMemcpyAsync(got.data(), out, ob, cudaMemcpyDeviceToHost, b.stream) != cudaSuccess ||
      cudaStreamSynchronize(b.stream) != cudaSuccess)
    return "download failed";
  progress.stage(r, CaseProgress::kWait);
  Status st = w.value().wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  if (!st.ok()) return "wait: " + st.to_string();
  progress.stage(r, CaseProgress::kVerify);
  if (c.kind == Kind::kReduce && r != c.root) return "";
  std::vector<std::byte> want = expected(c, n, r, inputs);
  for (size_t i = 0; i < ob; ++i)
    if (got[i] != want[i])
      return "first difference at byte " + std::to_string(i) + " of " + std::to_string(ob) + " (element " +
             std::to_string(i / es) + "): got " + std::to_string(static_cast<int>(got[i])) + ", want " +
             std::to_string(static_cast<int>(want[i]));
  return "";
}

std::vector<Case> all_cases(int n) {
  std::vector<Case> cases;
  const size_t counts[] = {1, 7, 4099};
  for (int d = 0; d < kNumDataTypes; ++d) {
    auto dt = static_cast<DataType>(d);
    for (size_t count : counts) {
      for (bool ip : {false, true}) {
        cases.push_back({Kind::kAllGather, dt, ReduceOp::kSum, count, ip, 0});
        cases.push_back({Kind::kBroadcast, dt, ReduceOp::kSum, count, ip, n - 1});
      }
      for (int o = 0; o < kNumReduceOps; ++o) {
        auto op = static_cast<ReduceOp>(o);
        if (!reduce_op_supported(dt, op)) continue;
        for (Kind k : {Kind::kReduceScatter, Kind::kAllReduce, Kind::kReduce})
          cases.push_back({k, dt, op, count, count == 7, n / 2});
      }
    }
  }
  // Large: the vector path with many blocks, odd tails, both 16-bit floats.
  const size_t big = (size_t{1} << 20) + 3;
  for (DataType dt : {DataType::kBFloat16, DataType::kFloat32}) {
    cases.push_back({Kind::kAllGather, dt, ReduceOp::kSum, big, false, 0});
    cases.push_back({Kind::kReduceScatter, dt, ReduceOp::kSum, big, false, 0});
    cases.push_back({Kind::kAllReduce, dt, ReduceOp::kAvg, big, true, 0});
    cases.push_back({Kind::kAllReduce, dt, ReduceOp::kMax, big + 5, false, 0});
  }
  cases.push_back({Kind::kAllGather, DataType::kUInt8, ReduceOp::kSum, size_t{8} << 20, true, 0});
  // One-shot all-reduce (out of place, 64-512 KiB read from the peers at 2-4 ranks), and its in-place neighbour.
  const size_t mid = 40000;
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
    cases.push_back({Kind::kAllReduce, dt, ReduceOp::kSum, mid, false, 0});
    cases.push_back({Kind::kAllReduce, dt, ReduceOp::kAvg, mid, false, 0});
    cases.push_back({Kind::kAllReduce, dt, ReduceOp::kSum, mid, true, 0});
    cases.push_back({Kind::kAllReduce, dt, ReduceOp::kSum, mid, false, 0, 0.3});
  }
  // Pre-multiplied sums (FSDP2's 1/world gradient divide, a factor that rounds, and 0: zeros, as NCCL gives — torch
  // 2.11 hands NCCL a bf16 factor of 0 for every power of two, pytorch/pytorch#190745).
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16, DataType::kFloat64})
    for (double premul : {1.0 / n, 0.3, 0.0})
      for (Kind k : {Kind::kReduceScatter, Kind::kAllReduce, Kind::kReduce})
        cases.push_back({k, dt, ReduceOp::kSum, 4099, false, 0, premul});
  return cases;
}

// ZW_TEST_CASES=quick keeps about 40 % of the cases: count 1 goes (7 and 4099 cover the scalar tail and the vectors);
// at count 7 (the in-place reductions) only sums; of the large cases the bf16 ones; of the one-shot ones the plain
// f32 sum and the bf16 pre-multiplied sum; of the pre-multiplied sums the f32 and bf16 ones with 1/world and 0.
bool quick_case(const Case& c, int n) {
  const bool bf16 = c.dt == DataType::kBFloat16, f32 = c.dt == DataType::kFloat32;
  if (c.count == 1) return false;
  if (c.count == 7) return c.op == ReduceOp::kSum;
  if (c.count == 40000)
    return (f32 && c.op == ReduceOp::kSum && c.premul == 1.0 && !c.in_place) || (bf16 && c.premul != 1.0);
  if (c.premul != 1.0) return (f32 || bf16) && (c.premul == 1.0 / n || c.premul == 0.0);
  if (c.count > 40000) return bf16;
  return true;
}

std::vector<Case> selected_cases(int n) {
  std::vector<Case> cases = all_cases(n);
  if (gpu_test::env_or("ZW_TEST_CASES", "all") != "quick") return cases;
  std::vector<Case> quick;
  for (const Case& c : cases)
    if (quick_case(c, n)) quick.push_back(c);
  return quick;
}

// Once per process: what decides whether the ranks' kernels can run side by side on a GPU.
void print_gpu_environment(int ndev) {
  static std::once_flag once;
  std::call_once(once, [ndev] {
    cudaDeviceProp p{};
    int mode = -1;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return;
    cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0);
    std::printf(
        "[env] %d GPU(s): %s, %d SMs, concurrent kernels %d, compute mode %d; CUDA_DEVICE_MAX_CONNECTIONS=%s "
        "CUDA_MODULE_LOADING=%s CUDA_LAUNCH_BLOCKING=%s CUDA_VISIBLE_DEVICES=%s ZW_CUDA_ALGO=%s\n",
        ndev, p.name, p.multiProcessorCount, p.concurrentKernels, mode,
        gpu_test::env_or("CUDA_DEVICE_MAX_CONNECTIONS", "(8)").c_str(),
        gpu_test::env_or("CUDA_MODULE_LOADING", "(lazy)").c_str(),
        gpu_test::env_or("CUDA_LAUNCH_BLOCKING", "(0)").c_str(),
        gpu_test::env_or("CUDA_VISIBLE_DEVICES", "(all)").c_str(), knobs().cuda_algo.c_str());
    std::fflush(stdout);
  });
}

class GpuCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GpuCollectivesTest, EveryOpDtypeAndCountMatchesTheHostReference) {
  SKIP_WITHOUT_GPU();
  const int n = GetParam(), ndev = device_count();
  const std::vector<int> worlds = gpu_test::env_ints("ZW_TEST_WORLDS");
  if (!worlds.empty() && std::find(worlds.begin(), worlds.end(), n) == worlds.end())
    GTEST_SKIP() << "world of " << n << " ranks not in ZW_TEST_WORLDS=" << gpu_test::env_or("ZW_TEST_WORLDS", "");
  print_gpu_environment(ndev);
  const double timeout_s = gpu_test::env_seconds("ZW_TEST_TIMEOUT_S", 60);
  const std::vector<Case> cases = selected_cases(n);
  size_t max_bytes = 0;
  for (const Case& c : cases) max_bytes = std::max({max_bytes, in_bytes(c, n), out_bytes(c, n)});
  CaseProgress progress("n" + std::to_string(n), n, cases.size(), std::clamp(timeout_s / 3, 2.0, 10.0),
                        [&cases](size_t i) { return describe(cases[i]); });
  // Each rank thread makes every rank's inputs of a case (the reference needs them all): n^2 inputs per case.
  auto store = make_memory_store();
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      RankBuffers b;
      b.device = r % ndev;
      cudaSetDevice(b.device);
      cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking);
      b.bytes = max_bytes;
      if (cudaMalloc(&b.staging, max_bytes) != cudaSuccess || cudaMalloc(&b.in, max_bytes) != cudaSuccess ||
          cudaMalloc(&b.out, max_bytes) != cudaSuccess) {
        failures[r] = "cudaMalloc failed";
        progress.leave(r);
        return;
      }
      CommConfig config;
      config.timeout_s = timeout_s;
      auto comm = Communicator::create(store, r, n, config);
      if (!comm.ok()) {
        failures[r] = comm.status().to_string();
        progress.leave(r);
        return;
      }
      for (size_t i = 0; i < cases.size() && failures[r].empty(); ++i) {
        const Case& c = cases[i];
        progress.begin(r, i);
        std::vector<std::vector<std::byte>> inputs(n);
        for (int p = 0; p < n; ++p) inputs[p] = random_input(c.dt, in_bytes(c, n) / dtype_size(c.dt), i * 131 + p);
        std::string err = run_case(*comm.value(), b, c, inputs, progress, timeout_s);
        if (!err.empty()) failures[r] = "case " + std::to_string(i + 1) + " " + describe(c) + ": " + err;
        progress.end(r, i);
      }
      progress.leave(r);
      comm.value().reset();
      cudaFree(b.staging);
      cudaFree(b.in);
      cudaFree(b.out);
      cudaStreamDestroy(b.stream);
    });
  }
  for (auto& t : threads) t.join();
  progress.report();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
}

INSTANTIATE_TEST_SUITE_P(Worlds, GpuCollectivesTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace zw
