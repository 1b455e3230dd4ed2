// tests/gpu/gpu_staged_test.cc — the staged device-memory path (collectives/gpu/gpu_staged.h) against a host reference.
//
// Ranks run as threads over shm and tcp with CommConfig::cuda_path = "staged" (a per-communicator setting, so this
// binary does not depend on the process environment) and small staging chunks (64 KiB), so the large count spans many
// pipeline chunks. Every case produces its input on the rank's stream (an asynchronous copy right before the
// collective), poisons the output there, and reads the result back on the same stream right after the call, before
// waiting for the Work: a copy not ordered after the host result would read poison or stale data. Inputs follow
// bench/data_pattern.h (small integers: every reduction is exact in any order), so the host algorithms' order of
// reduction does not matter. Also: interleaving with host collectives, back-to-back operations on two streams (the
// staging area is shared), and failures that must release the stream instead of hanging it.
// StagedPlan.* needs no GPU: it runs the chunk plan with host vectors standing in for device buffers (memcpy for the
// copies, the public host collectives for the chunks), which checks the chunking and staging layout everywhere.
// The GPU tests skip with "no CUDA device" where no GPU is visible, and with "needs N GPUs" where ranks as threads
// would share a GPU (fewer GPUs than ranks), which the staged path does not support.
#include "tests/gpu/gpu_test_util.h"
#include "collectives/gpu/gpu_staged.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/data_pattern.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw {
namespace {

using namespace zw::pattern;  // NOLINT(google-build-using-namespace): test-only shorthand
using internal::OpKind;

// Before the first CUDA call: more hardware queues for the ranks' streams. Stream memory waits are invisible to the
// scheduler, so ranks whose streams share a queue could hold each other's copies back (see gpu_staged.h).
[[maybe_unused]] const bool kMoreConnections = [] { return setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) == 0; }();

using gpu_test::device_count;

constexpr size_t kChunk = 64 << 10;
constexpr size_t kLarge = (size_t{1} << 18) + 3;  // 1 MiB of floats: 17 chunks of 64 KiB (per rank's block too)

struct Case {
  OpKind kind;
  DataType dt;
  ReduceOp op;
  size_t count;
  bool in_place;
  int root;
};

std::string describe(const Case& c) {
  return std::string(internal::op_kind_name(c.kind)) + " " + dtype_name(c.dt) + " " + reduce_op_name(c.op) + " count " +
         std::to_string(c.count) + (c.in_place ? " in-place" : "") + " root " + std::to_string(c.root);
}

bool reduces(OpKind k) { return k == OpKind::kReduceScatter || k == OpKind::kAllReduce || k == OpKind::kReduce; }
size_t in_count(const Case& c, int n) { return c.kind == OpKind::kReduceScatter ? c.count * n : c.count; }
size_t out_count(const Case& c, int n) { return c.kind == OpKind::kAllGather ? c.count * n : c.count; }

std::vector<std::byte> make_input(const Case& c, int n, int r) {
  std::vector<std::byte> v(in_count(c, n) * dtype_size(c.dt));
  const ReduceOp op = reduces(c.kind) ? c.op : ReduceOp::kSum;
  for (size_t i = 0; i < in_count(c, n); ++i) store_value(c.dt, v.data(), i, input_value(op, r, i));
  return v;
}

// Compares rank r's output with the serial reference; returns the first difference or "".
std::string check_output(const Case& c, int n, int r, const std::vector<std::byte>& got) {
  if (c.kind == OpKind::kReduce && r != c.root) return "";
  for (size_t i = 0; i < out_count(c, n); ++i) {
    double want = 0;
    switch (c.kind) {
      case OpKind::kAllGather:
        want = as_stored(c.dt, input_value(ReduceOp::kSum, i / c.count, i % c.count));
        break;
      case OpKind::kBroadcast:
        want = as_stored(c.dt, input_value(ReduceOp::kSum, c.root, i));
        break;
      case OpKind::kReduceScatter:
        want = reference(c.dt, c.op, n, r * c.count + i);
        break;
      default:
        want = reference(c.dt, c.op, n, i);
        break;
    }
    const double v = load_value(c.dt, got.data(), i);
    if (!(std::abs(v - want) <= tolerance(c.dt, c.op, want)))
      return "element " + std::to_string(i) + " of " + std::to_string(out_count(c, n)) + ": got " + std::to_string(v) +
             ", want " + std::to_string(want);
  }
  return "";
}

std::vector<Case> all_cases(int n) {
  const std::pair<DataType, ReduceOp> pairs[] = {{DataType::kFloat32, ReduceOp::kSum},
                                                 {DataType::kBFloat16, ReduceOp::kMax},
                                                 {DataType::kInt32, ReduceOp::kProd},
                                                 {DataType::kFloat16, ReduceOp::kAvg},
                                                 {DataType::kUInt8, ReduceOp::kSum}};
  std::vector<Case> cases;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}}) {
    for (bool ip : {false, true}) {
      cases.push_back({OpKind::kAllGather, DataType::kFloat32, ReduceOp::kSum, count, ip, 0});
      cases.push_back({OpKind::kAllGather, DataType::kUInt8, ReduceOp::kSum, count, ip, 0});
      cases.push_back({OpKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum, count, ip, n - 1});
      cases.push_back({OpKind::kBroadcast, DataType::kInt64, ReduceOp::kSum, count, ip, 0});
      for (auto [dt, op] : pairs)
        for (OpKind k : {OpKind::kReduceScatter, OpKind::kAllReduce, OpKind::kReduce})
          cases.push_back({k, dt, op, count, ip, n / 2});
    }
  }
  cases.push_back({OpKind::kAllGather, DataType::kFloat32, ReduceOp::kSum, kLarge, false, 0});
  cases.push_back({OpKind::kAllGather, DataType::kBFloat16, ReduceOp::kSum, kLarge, true, 0});
  cases.push_back({OpKind::kReduceScatter, DataType::kFloat32, ReduceOp::kSum, kLarge, false, 0});
  cases.push_back({OpKind::kReduceScatter, DataType::kBFloat16, ReduceOp::kAvg, kLarge, true, 0});
  cases.push_back({OpKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, kLarge, true, 0});
  cases.push_back({OpKind::kAllReduce, DataType::kBFloat16, ReduceOp::kAvg, kLarge + 5, false, 0});
  cases.push_back({OpKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum, kLarge, false, n - 1});
  cases.push_back({OpKind::kReduce, DataType::kFloat32, ReduceOp::kMax, kLarge, false, 0});
  return cases;
}

Result<Work> issue(Communicator& comm, OpKind kind, const CollectiveOptions& o) {
  switch (kind) {
    case OpKind::kAllGather:
      return all_gather(comm, o);
    case OpKind::kReduceScatter:
      return reduce_scatter(comm, o);
    case OpKind::kAllReduce:
      return all_reduce(comm, o);
    case OpKind::kBroadcast:
      return broadcast(comm, o);
    default:
      return reduce(comm, o);
  }
}

// Where a case's input and output live inside two buffers `a` (input) and `b` (output) of its world.
void place(const Case& c, int r, std::byte* a, std::byte* b, std::byte** in, std::byte** out) {
  const size_t block = c.count * dtype_size(c.dt);
  *in = a;
  *out = b;
  if (!c.in_place) return;
  if (c.kind == OpKind::kAllGather) *in = b + r * block;
  if (c.kind == OpKind::kReduceScatter) *out = a + r * block;
  if (c.kind == OpKind::kAllReduce || c.kind == OpKind::kBroadcast || c.kind == OpKind::kReduce) *in = b;
}

CommConfig staged_config(const std::string& transport, double timeout_s = 60) {
  CommConfig config;
  config.transport = transport;
  config.timeout_s = timeout_s;
  config.cuda_path = "staged";
  config.cuda_staging_chunk = kChunk;
  return config;
}

// Runs fn(rank, comm) on n threads, each with its own communicator over one in-memory store; collects failures.
void run_ranks(int n, const CommConfig& config, const std::function<std::string(int, Communicator&)>& fn) {
  auto store = make_memory_store();
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::create(store, r, n, config);
      failures[r] = comm.ok() ? fn(r, *comm.value()) : comm.status().to_string();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
}

using Param = std::tuple<std::string, int>;  // transport, world size
std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::get<0>(info.param) + "_n" + std::to_string(std::get<1>(info.param));
}

// ---- The chunk plan, simulated on the host (no GPU needed). ----

void host_copy(const internal::gpu::StagedCopy& c) {
  for (size_t row = 0; row < c.height; ++row) std::memmove(c.dst + row * c.dpitch, c.src + row * c.spitch, c.width);
}

std::string simulate(Communicator& comm, const Case& c) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = dtype_size(c.dt);
  std::vector<std::byte> a = make_input(c, n, r), b(out_count(c, n) * es, std::byte{0xA5});
  a.resize(std::max(a.size(), b.size()));
  std::byte *in = nullptr, *out = nullptr;
  place(c, r, a.data(), b.data(), &in, &out);
  if (in != a.data()) std::memcpy(in, a.data(), in_count(c, n) * es);  // in place: the input lives in the output
  CollectiveOptions o;
  o.input = MemRef{in, in_count(c, n) * es, MemKind::kCudaDevice, 0};
  o.output = MemRef{out, out_count(c, n) * es, MemKind::kCudaDevice, 0};
  const internal::OpDesc desc{c.kind, internal::Algo::kRing, c.dt, c.op, static_cast<uint32_t>(c.root), c.count};
  std::vector<std::byte> staging(internal::gpu::staging_bytes(desc, n));
  auto plan = internal::gpu::plan_staged(comm.impl(), desc, o, staging.data(), kChunk);
  if (c.count > 0 && plan.chunks.size() != (c.count * es + kChunk - 1) / kChunk)
    return "planned " + std::to_string(plan.chunks.size()) + " chunks";
  host_copy(plan.d2d);
  for (const auto& chunk : plan.chunks) {
    host_copy(chunk.d2h);
    auto w = issue(comm, c.kind, chunk.host);
    Status st = w.ok() ? w.value().wait() : w.status();
    if (!st.ok()) return "chunk: " + st.to_string();
    host_copy(chunk.h2d);
  }
  std::vector<std::byte> got(out, out + out_count(c, n) * es);
  return check_output(c, n, r, got);
}

class StagedPlanTest : public ::testing::TestWithParam<Param> {};

TEST_P(StagedPlanTest, ChunkedHostCollectivesMatchTheReference) {
  const auto [transport, n] = GetParam();
  run_ranks(n, staged_config(transport), [&](int, Communicator& comm) -> std::string {
    for (const Case& c : all_cases(n)) {
      std::string err = simulate(comm, c);
      if (!err.empty()) return describe(c) + ": " + err;
    }
    return "";
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, StagedPlanTest,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(1, 2, 3)), param_name);

TEST(StagedConfig, UnknownPathAndTinyChunkAreRejected) {
  auto store = make_memory_store();
  CommConfig bad = staged_config("shm");
  bad.cuda_path = "nvlink";
  auto comm = Communicator::create(store, 0, 1, bad);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("ZW_CUDA_PATH"), std::string::npos) << comm.status().to_string();
  bad = staged_config("shm");
  bad.cuda_staging_chunk = 100;
  comm = Communicator::create(store, 0, 1, bad);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("ZW_CUDA_STAGING_CHUNK"), std::string::npos) << comm.status().to_string();
}

// ---- On the GPU. ----

// One rank's device side: a stream, three buffers of the largest case (input source, input, output) and a pinned
// host buffer for uploads and read-backs. Ranks that share a GPU share its context: a pageable copy or an allocation
// in one rank's thread can wait for another rank's stream, which waits (cuStreamWaitValue32) for this rank's host
// op: so every allocation happens in open(), before the ranks meet at a barrier, and copies use pinned memory.
struct Device {
  int ordinal = 0;
  cudaStream_t stream = nullptr;
  std::byte* source = nullptr;
  std::byte* a = nullptr;
  std::byte* b = nullptr;
  std::byte* host = nullptr;

  std::string open(int rank, size_t bytes) {
    ordinal = rank % device_count();
    if (cudaSetDevice(ordinal) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
      return "cannot set up GPU " + std::to_string(ordinal);
    for (std::byte** p : {&source, &a, &b})
      if (cudaMalloc(p, bytes) != cudaSuccess) return "cudaMalloc(" + std::to_string(bytes) + ") failed";
    if (cudaMallocHost(&host, bytes) != cudaSuccess) return "cudaMallocHost(" + std::to_string(bytes) + ") failed";
    return "";
  }
  ~Device() {
    for (std::byte* p : {source, a, b}) cudaFree(p);
    if (host != nullptr) cudaFreeHost(host);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  MemRef ref(std::byte* p, size_t bytes) const { return MemRef{p, bytes, MemKind::kCudaDevice, ordinal}; }
};

// Produces the input on the stream, poisons the output there, runs the case and reads the output back on the stream
// before waiting for the Work.
std::string run_on_gpu(Communicator& comm, Device& d, const Case& c) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = dtype_size(c.dt), ib = in_count(c, n) * es, ob = out_count(c, n) * es;
  std::vector<std::byte> input = make_input(c, n, r);
  std::byte *in = nullptr, *out = nullptr;
  place(c, r, d.a, d.b, &in, &out);
  if (cudaStreamSynchronize(d.stream) != cudaSuccess) return "the stream failed before the case";
  std::memcpy(d.host, input.data(), ib);
  if (cudaMemcpyAsync(d.source, d.host, ib, cudaMemcpyHostToDevice, d.stream) != cudaSuccess ||
      cudaMemsetAsync(out, 0xA5, ob, d.stream) != cudaSuccess ||
      cudaMemcpyAsync(in, d.source, ib, cudaMemcpyDeviceToDevice, d.stream) != cudaSuccess)
    return "preparing the input failed";
  CollectiveOptions o;
  o.input = d.ref(in, ib);
  o.output = d.ref(out, ob);
  o.count = c.count;
  o.dtype = c.dt;
  o.op = c.op;
  o.root = c.root;
  o.stream = d.stream;
  Result<Work> w = issue(comm, c.kind, o);
  if (!w.ok()) return "issue: " + w.status().to_string();
  if (cudaMemcpyAsync(d.host, out, ob, cudaMemcpyDeviceToHost, d.stream) != cudaSuccess ||
      cudaStreamSynchronize(d.stream) != cudaSuccess)
    return "reading the output failed";
  Status st = w.value().wait(std::chrono::seconds(60));
  if (!st.ok()) return "wait: " + st.to_string();
  return check_output(c, n, r, std::vector<std::byte>(d.host, d.host + ob));
}

size_t largest_bytes(const std::vector<Case>& cases, int n) {
  size_t most = 0;
  for (const Case& c : cases)
    most = std::max({most, in_count(c, n) * dtype_size(c.dt), out_count(c, n) * dtype_size(c.dt)});
  return most;
}

class StagedGpuTest : public ::testing::TestWithParam<Param> {};

TEST_P(StagedGpuTest, EveryCollectiveMatchesTheHostReference) {
  SKIP_WITHOUT_GPU();
  const auto [transport, n] = GetParam();
  SKIP_WITHOUT_GPUS(n, n << " ranks as threads of one process would share a GPU, which the staged path does not "
                         << "support (gpu_staged.h); the zw_gpu_staged_check_*_n" << n
                         << " entries run it as separate processes");
  const std::vector<Case> cases = all_cases(n);
  run_ranks(n, staged_config(transport), [&](int, Communicator& comm) -> std::string {
    Device d;
    std::string err = d.open(comm.rank(), largest_bytes(cases, n));
    if (err.empty()) {
      Result<Work> met = barrier(comm);  // every rank has allocated before any stream waits for a host op
      Status st = met.ok() ? met.value().wait() : met.status();
      if (!st.ok()) err = "barrier: " + st.to_string();
    }
    for (size_t i = 0; i < cases.size() && err.empty(); ++i) {
      err = run_on_gpu(comm, d, cases[i]);
      if (!err.empty()) err = describe(cases[i]) + ": " + err;
    }
    return err;
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, StagedGpuTest,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(1, 2, 3, 4)),
                         param_name);

// Device and host collectives of one communicator, and device collectives on two streams, all issued before any
// is waited for: they must run in issue order, and the second stream must not overwrite the staging area the first
// operation still uses.
TEST(StagedGpuOrder, InterleavedWithHostCollectivesAndAcrossStreams) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_GPUS(2,
                    "its 2 ranks as threads of one process would share a GPU, which the staged path does not "
                    "support (gpu_staged.h)");
  const int n = 2;
  const size_t count = 3 * kChunk / 4 + 1;  // floats: four staging chunks
  run_ranks(n, staged_config("tcp"), [&](int r, Communicator& comm) -> std::string {
    Device d;
    std::string err = d.open(r, count * 4 * n);
    cudaStream_t other = nullptr;
    if (!err.empty() || cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) != cudaSuccess) return err + " stream";
    std::vector<float> ones(count, 1.0f + r), host_in(count, 10.0f * (r + 1)), host_out(count), got_a(count),
        got_b(count * n);
    cudaMemcpyAsync(d.a, ones.data(), count * 4, cudaMemcpyHostToDevice, d.stream);
    cudaMemcpyAsync(d.source, ones.data(), count * 4, cudaMemcpyHostToDevice, other);
    CollectiveOptions dev{d.ref(d.a, count * 4), d.ref(d.a, count * 4), count, DataType::kFloat32};
    dev.stream = d.stream;
    CollectiveOptions host{MemRef::host(host_in.data(), count * 4), MemRef::host(host_out.data(), count * 4), count,
                           DataType::kFloat32};
    CollectiveOptions gather{d.ref(d.source, count * 4), d.ref(d.b, count * 4 * n), count, DataType::kFloat32};
    gather.stream = other;
    std::vector<Result<Work>> works;
    works.push_back(all_reduce(comm, dev));     // 1+2 = 3 everywhere
    works.push_back(all_reduce(comm, host));    // 10+20 = 30
    works.push_back(all_gather(comm, gather));  // [1..., 2...] on the other stream
    works.push_back(all_reduce(comm, dev));     // 3+3 = 6, after the first on the same stream
    cudaMemcpyAsync(got_a.data(), d.a, count * 4, cudaMemcpyDeviceToHost, d.stream);
    cudaMemcpyAsync(got_b.data(), d.b, count * 4 * n, cudaMemcpyDeviceToHost, other);
    for (auto& w : works) {
      Status st = w.ok() ? w.value().wait(std::chrono::seconds(60)) : w.status();
      if (!st.ok()) return st.to_string();
    }
    cudaStreamSynchronize(d.stream);
    cudaStreamSynchronize(other);
    cudaStreamDestroy(other);
    for (size_t i = 0; i < count; ++i)
      if (got_a[i] != 6.0f || host_out[i] != 30.0f || got_b[i] != 1.0f || got_b[count + i] != 2.0f)
        return "element " + std::to_string(i) + ": device " + std::to_string(got_a[i]) + " host " +
               std::to_string(host_out[i]) + " gathered " + std::to_string(got_b[i]) + "/" +
               std::to_string(got_b[count + i]);
    return "";
  });
}

// Rank 1 never issues anything. Rank 0's device collective (timing out) and one queued behind a failing host
// collective (never run by the worker) must both report an error naming rank 1 and release the stream.
TEST(StagedGpuFailure, AbsentPeerFailsTheWorkAndReleasesTheStream) {
  SKIP_WITHOUT_GPU();
  for (bool behind_host_op : {false, true}) {
    run_ranks(2, staged_config("shm", 2), [&](int r, Communicator& comm) -> std::string {
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(4));  // stays connected, silent, past rank 0's timeout
        return "";
      }
      Device d;
      std::string err = d.open(r, 1 << 20);
      if (!err.empty()) return err;
      std::vector<float> host(1024);
      std::vector<Result<Work>> works;
      if (behind_host_op)
        works.push_back(all_reduce(comm, {MemRef::host(host.data(), 4096), MemRef::host(host.data(), 4096), 1024}));
      CollectiveOptions o{d.ref(d.a, 1 << 20), d.ref(d.a, 1 << 20), (1 << 20) / 4, DataType::kFloat32};
      o.stream = d.stream;
      works.push_back(all_reduce(comm, o));
      if (!works.back().ok()) return "issue: " + works.back().status().to_string();
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (cudaStreamQuery(d.stream) == cudaErrorNotReady)
        if (std::chrono::steady_clock::now() > until) return "the stream is still blocked 30 s after the failure";
      for (auto& w : works) {
        Status st = w.value().wait(std::chrono::seconds(30));
        if (st.ok()) return "an operation without its peer succeeded";
        if (st.message().find("rank 1") == std::string::npos)
          return "the error does not name rank 1: " + st.to_string();
      }
      return "";
    });
  }
}

}  // namespace
}  // namespace zw
