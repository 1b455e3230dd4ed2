// tests/gpu/gpu_p2p_test.cc — send/recv batches and all_to_all on CUDA device memory (collectives/gpu/gpu_p2p.cc,
// gpu_staged_p2p.cc) against a host reference, their stream order, and a killed peer.
//
// Ranks are separate processes (this binary started again per rank with only the current test selected, the
// ZW_P2P_TEST_* variables saying which rank it is and where the parent's TCP store listens), each on GPU
// rank % visible GPUs: the stream-ordered path is for ranks of different processes (ranks of one process that may
// share a GPU take the synchronous path; TwoThreadsOfOneProcessTakeTheSynchronousPath covers that). Every case writes
// its inputs and poisons its outputs on the rank's stream right before the call, and reads the outputs back on the
// same stream right after it, before waiting for the Work: a receive not ordered after the host transfer reads poison.
// Values are small integers (exact in bf16) that encode sender, receiver and index, so a misplaced block shows.
// Transports: the batches and the stream-order case over shm (the pinned staging area written by peers with
// process_vm_writev), the staged all_to_all (CommConfig::cuda_path "staged") and the killed peer over tcp. all_to_all
// on one node runs the node-local engine's pairwise kernel (CUDA IPC between the processes); ranks as threads run it
// in tests/nccl/nccl_gpu_api_test.cc.
// Stream order: a host function holds the stream for 2 s before the operation (standing in for a long kernel: this
// binary has no device code); the call must return while it still holds it (an event after it not yet complete),
// and the received data must be the input written on the stream after it.
// Skips with "no CUDA device" where no GPU is visible (the parent checks; children are only started with a GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/data_pattern.h"
#include "tests/gpu/gpu_test_util.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

extern char** environ;

namespace zw {
namespace {

using gpu_test::device_count;
using pattern::load_value;
using pattern::store_value;

// Before the first CUDA call: stream memory waits are invisible to the scheduler (gpu_staged.h).
[[maybe_unused]] const bool kMoreConnections = [] { return setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) == 0; }();

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call
#define EXPECT_MESSAGE_HAS(status, text)                      \
  EXPECT_NE((status).message().find(text), std::string::npos) \
      << "missing '" << (text) << "' in " << (status).to_string()

// ---- Ranks as processes ----

struct RankEnv {
  int rank = 0, size = 0;
  std::string store, token, transport, cuda_path;
};

std::optional<RankEnv> child_env() {
  const std::string rank = gpu_test::env_or("ZW_P2P_TEST_RANK", "");
  if (rank.empty()) return std::nullopt;
  return RankEnv{std::atoi(rank.c_str()),
                 std::atoi(gpu_test::env_or("ZW_P2P_TEST_WORLD", "0").c_str()),
                 gpu_test::env_or("ZW_P2P_TEST_STORE", ""),
                 gpu_test::env_or("ZW_P2P_TEST_TOKEN", ""),
                 gpu_test::env_or("ZW_P2P_TEST_TRANSPORT", "shm"),
                 gpu_test::env_or("ZW_P2P_TEST_CUDA_PATH", "")};
}

// Starts n copies of this binary running only the current test as ranks 0..n-1 over `transport` (CommConfig::cuda_path
// `cuda_path`, empty: the default) and expects each to exit 0, except the ranks in `killed`, which must die of SIGKILL.
void run_as_processes(int n, const std::string& transport, const std::vector<int>& killed = {},
                      const std::string& cuda_path = "") {
  const std::string token = "p2p-test-" + std::to_string(getpid());
  auto server = start_tcp_store_server({"127.0.0.1:0", token});
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back("ZW_P2P_TEST_RANK=" + std::to_string(r));
    env.push_back("ZW_P2P_TEST_WORLD=" + std::to_string(n));
    env.push_back("ZW_P2P_TEST_STORE=" + server.value()->address());
    env.push_back("ZW_P2P_TEST_TOKEN=" + token);
    env.push_back("ZW_P2P_TEST_TRANSPORT=" + transport);
    env.push_back("ZW_P2P_TEST_CUDA_PATH=" + cuda_path);
    std::vector<char*> envp, argv;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", arg = filter;
    argv = {exe.data(), arg.data(), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()), 0);
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(150);
  std::vector<int> status(n, -1);
  for (int left = n; left > 0;) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] == 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        pids[r] = 0;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (pids[r] != 0) {
          ADD_FAILURE() << "rank " << r << " (pid " << pids[r] << ") did not finish within 150 s; killed";
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          pids[r] = 0;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < n; ++r) {
    if (status[r] == -1) continue;
    const bool should_die = std::find(killed.begin(), killed.end(), r) != killed.end();
    if (should_die)
      EXPECT_TRUE(WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL) << "rank " << r << ": status " << status[r];
    else
      EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
          << "rank " << r << " failed (status " << status[r] << "; its output is above)";
  }
}

// A rank's communicator, GPU and stream.
struct Rank {
  int rank = 0, size = 0;
  std::unique_ptr<Communicator> comm;
  cudaStream_t stream = nullptr;
};

Result<Rank> join(const RankEnv& env, double timeout_s) {
  const int gpus = device_count();
  if (gpus == 0 || cudaSetDevice(env.rank % gpus) != cudaSuccess)
    return Status(Code::kSystem, "rank " + std::to_string(env.rank) + ": no usable CUDA device");
  ZW_ASSIGN_OR_RETURN(auto store, connect_tcp_store(env.store, env.token, std::chrono::seconds(30)));
  CommConfig config;
  config.transport = env.transport;
  config.cuda_path = env.cuda_path;
  config.timeout_s = timeout_s;
  config.name = "p2p";
  ZW_ASSIGN_OR_RETURN(auto comm, Communicator::create(store, env.rank, env.size, config));
  Rank r{env.rank, env.size, std::move(comm), nullptr};
  if (cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking) != cudaSuccess)
    return Status(Code::kSystem, "cudaStreamCreate");
  return r;
}

// ---- Data ----

// Element i of the transfer from `from` to `to` (tag: varies it between cases): an integer of |v| <= 48.
double value(int from, int to, size_t i, int tag) {
  return static_cast<double>(static_cast<int>((from * 31 + to * 7 + i * 3 + tag * 11) % 97) - 48);
}

// Device and pinned host memory of one case, freed at the end.
struct Buffers {
  std::byte* dev = nullptr;
  std::byte* host = nullptr;
  explicit Buffers(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&dev, std::max<size_t>(bytes, 1)), cudaSuccess);
    EXPECT_EQ(cudaMallocHost(&host, std::max<size_t>(bytes, 1)), cudaSuccess);
  }
  ~Buffers() {
    cudaFree(dev);
    cudaFreeHost(host);
  }
};

// One transfer of a batch as this rank sees it.
struct Xfer {
  P2PKind kind;
  int peer;
  size_t count;
  size_t offset = 0;  // bytes into the send or receive buffers
};

MemRef dev_ref(void* p, size_t bytes) {
  int device = 0;
  cudaGetDevice(&device);
  return MemRef{p, bytes, MemKind::kCudaDevice, device};
}

size_t align(size_t b) { return (b + 255) / 256 * 256; }

// Runs one batch on device memory: writes the sends and poisons the receives on the stream, issues, reads the
// receives back on the stream before waiting, then checks every element. Returns the first mismatch or "".
std::string run_batch(Rank& k, std::vector<Xfer> xs, DataType dt, int tag) {
  const size_t es = dtype_size(dt);
  size_t send_bytes = 0, recv_bytes = 0;
  for (Xfer& x : xs) {
    size_t& total = x.kind == P2PKind::kSend ? send_bytes : recv_bytes;
    x.offset = total;
    total += align(x.count * es);
  }
  Buffers in(send_bytes), out(recv_bytes);
  std::vector<P2POp> ops;
  for (const Xfer& x : xs) {
    P2POp op;
    op.kind = x.kind;
    op.options.count = x.count;
    op.options.dtype = dt;
    op.options.peer = x.peer;
    op.options.stream = k.stream;
    if (x.kind == P2PKind::kSend) {
      for (size_t i = 0; i < x.count; ++i) store_value(dt, in.host + x.offset, i, value(k.rank, x.peer, i, tag));
      op.options.input = dev_ref(in.dev + x.offset, x.count * es);
    } else {
      op.options.output = dev_ref(out.dev + x.offset, x.count * es);
    }
    ops.push_back(op);
  }
  if (cudaMemcpyAsync(in.dev, in.host, send_bytes, cudaMemcpyHostToDevice, k.stream) != cudaSuccess ||
      cudaMemsetAsync(out.dev, 0xA5, recv_bytes, k.stream) != cudaSuccess)
    return "cuda error preparing the case";
  auto work = send_recv(*k.comm, ops);
  if (!work.ok()) return "send_recv: " + work.status().to_string();
  if (cudaMemcpyAsync(out.host, out.dev, recv_bytes, cudaMemcpyDeviceToHost, k.stream) != cudaSuccess)
    return "cuda error reading back";
  if (Status st = work.value().wait(); !st.ok()) return "wait: " + st.to_string();
  if (cudaStreamSynchronize(k.stream) != cudaSuccess) return "cudaStreamSynchronize";
  for (const Xfer& x : xs) {
    if (x.kind != P2PKind::kRecv) continue;
    for (size_t i = 0; i < x.count; ++i) {
      const double want = value(x.peer, k.rank, i, tag), got = load_value(dt, out.host + x.offset, i);
      if (got != want)
        return "receive from rank " + std::to_string(x.peer) + ", " + dtype_name(dt) + " count " +
               std::to_string(x.count) + ": element " + std::to_string(i) + " is " + std::to_string(got) +
               ", expected " + std::to_string(want);
    }
  }
  return "";
}

// The batches of SendRecvBatches for rank r of n with `base` elements (per sender `base + from` in the mixed one).
std::vector<std::pair<std::string, std::vector<Xfer>>> patterns(int r, int n, size_t base) {
  const int right = (r + 1) % n, left = (r + n - 1) % n, mate = r ^ 1;
  std::vector<std::pair<std::string, std::vector<Xfer>>> out;
  out.push_back({"ring shift", {{P2PKind::kRecv, left, base}, {P2PKind::kSend, right, base}}});
  if (mate < n) out.push_back({"pairwise exchange", {{P2PKind::kSend, mate, base}, {P2PKind::kRecv, mate, base}}});
  out.push_back({"self and neighbours, sizes by sender",
                 {{P2PKind::kSend, r, base + r},
                  {P2PKind::kSend, right, base + r},
                  {P2PKind::kRecv, left, base + left},
                  {P2PKind::kRecv, r, base + r}}});
  std::vector<Xfer> all;  // every rank to every rank (all_to_all with splits, as torch's all_to_all_single builds)
  for (int p = 0; p < n; ++p) all.push_back({P2PKind::kSend, p, base + 2 * r + p});
  for (int p = 0; p < n; ++p) all.push_back({P2PKind::kRecv, p, base + 2 * p + r});
  out.push_back({"all to all with splits", all});
  return out;
}

TEST(GpuP2p, SendRecvBatches) {
  if (auto env = child_env()) {
    auto k = join(*env, 60);
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    int tag = 0;
    for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32})
      for (size_t base : {size_t{0}, size_t{1}, size_t{7}, size_t{(1 << 20) + 3}})
        for (auto& [name, xs] : patterns(k.value().rank, k.value().size, base)) {
          std::string err = run_batch(k.value(), xs, dt, ++tag);
          ASSERT_TRUE(err.empty()) << "rank " << k.value().rank << ", " << name << ": " << err;
        }
    return;
  }
  SKIP_WITHOUT_GPU();
  run_as_processes(4, "shm");
}

// all_to_all of `count` elements per block; returns the first mismatch or "".
// `in` and `out` hold at least size × count elements (allocated up front: ranks as threads must not cudaFree while
// a peer's kernel may spin). `aside`: the input is first copied into a stream-ordered allocation (cudaMallocAsync, as
// libzwnccl's in-place ncclAlltoAll does), which CUDA IPC cannot export.
std::string run_all_to_all(Rank& k, DataType dt, size_t count, int tag, Buffers& in, Buffers& out, bool aside = false) {
  const size_t es = dtype_size(dt), n = static_cast<size_t>(k.size), bytes = n * count * es;
  for (size_t p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) store_value(dt, in.host, p * count + i, value(k.rank, int(p), i, tag));
  CollectiveOptions o;
  o.input = dev_ref(in.dev, bytes);
  o.output = dev_ref(out.dev, bytes);
  o.count = count;
  o.dtype = dt;
  o.stream = k.stream;
  if (cudaMemcpyAsync(in.dev, in.host, bytes, cudaMemcpyHostToDevice, k.stream) != cudaSuccess ||
      cudaMemsetAsync(out.dev, 0xA5, bytes, k.stream) != cudaSuccess)
    return "cuda error preparing the case";
  void* copy = nullptr;
  if (aside) {
    if (cudaMallocAsync(&copy, bytes, k.stream) != cudaSuccess ||
        cudaMemcpyAsync(copy, in.dev, bytes, cudaMemcpyDeviceToDevice, k.stream) != cudaSuccess)
      return "cuda error copying the input aside";
    o.input = dev_ref(copy, bytes);
  }
  auto work = all_to_all(*k.comm, o);
  if (aside) cudaFreeAsync(copy, k.stream);
  if (!work.ok()) return "all_to_all: " + work.status().to_string();
  if (cudaMemcpyAsync(out.host, out.dev, bytes, cudaMemcpyDeviceToHost, k.stream) != cudaSuccess)
    return "cuda error reading back";
  if (Status st = work.value().wait(); !st.ok()) return "wait: " + st.to_string();
  if (cudaStreamSynchronize(k.stream) != cudaSuccess) return "cudaStreamSynchronize";
  for (size_t p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) {
      const double want = value(int(p), k.rank, i, tag), got = load_value(dt, out.host, p * count + i);
      if (got != want)
        return std::string(dtype_name(dt)) + " count " + std::to_string(count) + ": block " + std::to_string(p) +
               " element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " + std::to_string(want);
    }
  return "";
}

constexpr size_t kAllToAllCounts[] = {1, 5, 65537, (1 << 19) + 1};

// Every case of all_to_all on rank k; returns the first failure or "".
std::string all_to_all_cases(Rank& k) {
  const size_t bytes = static_cast<size_t>(k.size) * ((1 << 19) + 1) * sizeof(float);
  Buffers in(bytes), out(bytes);
  int tag = 0;
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32})
    for (size_t count : kAllToAllCounts)
      if (std::string err = run_all_to_all(k, dt, count, ++tag, in, out); !err.empty()) return err;
  if (std::string err = run_all_to_all(k, DataType::kFloat32, 4099, ++tag, in, out, /*aside=*/true); !err.empty())
    return "input in a cudaMallocAsync allocation: " + err;
  return "";
}

void all_to_all_rank(const RankEnv& env) {
  auto k = join(env, 60);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  const std::string err = all_to_all_cases(k.value());
  EXPECT_TRUE(err.empty()) << "rank " << env.rank << ": " << err;
}

// On one node: the node-local engine's pairwise kernel (CUDA IPC between the processes).
TEST(GpuP2p, AllToAll) {
  if (auto env = child_env()) return all_to_all_rank(*env);
  SKIP_WITHOUT_GPU();
  run_as_processes(3, "shm");
}

// Ranks as threads of one process sharing the visible GPUs (each on its own non-blocking stream): the same kernel.
TEST(GpuP2p, AllToAllRanksAsThreads) {
  if (child_env()) return;
  SKIP_WITHOUT_GPU();
  for (int n : {2, 3, 4}) {
    auto store = make_memory_store();
    std::vector<std::string> failures(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        cudaSetDevice(r % device_count());
        Rank k{r, n, nullptr, nullptr};
        cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking);
        {
          const size_t bytes = static_cast<size_t>(n) * ((1 << 19) + 1) * sizeof(float);
          Buffers in(bytes), out(bytes);  // before the communicator exists: no peer kernel spins yet
          CommConfig config;
          config.transport = "shm";
          config.timeout_s = 60;
          auto comm = Communicator::create(store, r, n, config);
          if (!comm.ok()) {
            failures[r] = comm.status().to_string();
          } else {
            k.comm = std::move(comm).value();
            int tag = 0;
            for (DataType dt : {DataType::kFloat32, DataType::kBFloat16})
              for (size_t count : kAllToAllCounts)
                if (failures[r].empty()) failures[r] = run_all_to_all(k, dt, count, ++tag, in, out);
            cudaStreamSynchronize(k.stream);
            k.comm.reset();  // waits for its kernels
          }
        }
        cudaStreamDestroy(k.stream);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) EXPECT_TRUE(failures[r].empty()) << n << " ranks, rank " << r << ": " << failures[r];
  }
}

// The staged form (as across hosts), over tcp.
TEST(GpuP2p, AllToAllStaged) {
  if (auto env = child_env()) return all_to_all_rank(*env);
  SKIP_WITHOUT_GPU();
  run_as_processes(3, "tcp", {}, "staged");
}

// Holds the stream for 2 s (a host function: a long kernel's effect on stream order without device code here).
void CUDART_CB hold_stream(void*) { std::this_thread::sleep_for(std::chrono::seconds(2)); }

TEST(GpuP2p, CallsReturnAtOnceAndRunInStreamOrder) {
  if (auto env = child_env()) {
    auto kr = join(*env, 60);
    ASSERT_TRUE(kr.ok()) << kr.status().to_string();
    Rank& k = kr.value();
    const int right = (k.rank + 1) % k.size, left = (k.rank + k.size - 1) % k.size;
    const size_t count = 1 << 20, bytes = count * sizeof(float);
    // Warm-up of the same size: the p2p engine and its staging area exist before the timed call.
    ASSERT_EQ(run_batch(k, {{P2PKind::kRecv, left, count}, {P2PKind::kSend, right, count}}, DataType::kFloat32, 1), "");
    Buffers in(bytes), out(bytes);
    for (size_t i = 0; i < count; ++i) store_value(DataType::kFloat32, in.host, i, value(k.rank, right, i, 2));
    cudaEvent_t held;
    CUDA_OK(cudaEventCreateWithFlags(&held, cudaEventDisableTiming));
    CUDA_OK(cudaLaunchHostFunc(k.stream, hold_stream, nullptr));
    CUDA_OK(cudaEventRecord(held, k.stream));
    CUDA_OK(cudaMemcpyAsync(in.dev, in.host, bytes, cudaMemcpyHostToDevice, k.stream));  // the input, after the hold
    CUDA_OK(cudaMemsetAsync(out.dev, 0xA5, bytes, k.stream));
    std::vector<P2POp> ops(2);
    ops[0].kind = P2PKind::kRecv;
    ops[0].options.output = dev_ref(out.dev, bytes);
    ops[0].options.peer = left;
    ops[1].kind = P2PKind::kSend;
    ops[1].options.input = dev_ref(in.dev, bytes);
    ops[1].options.peer = right;
    for (P2POp& op : ops) op.options.count = count, op.options.stream = k.stream;
    auto work = send_recv(*k.comm, ops);
    const cudaError_t held_state = cudaEventQuery(held);
    ASSERT_TRUE(work.ok()) << work.status().to_string();
    EXPECT_EQ(held_state, cudaErrorNotReady) << "send_recv returned only after the 2 s the stream was held: it waited "
                                                "for the stream instead of enqueuing on it";
    EXPECT_FALSE(work.value().test()) << "the batch completed while its stream was still held";
    CUDA_OK(cudaMemcpyAsync(out.host, out.dev, bytes, cudaMemcpyDeviceToHost, k.stream));
    ASSERT_TRUE(work.value().wait().ok());
    CUDA_OK(cudaStreamSynchronize(k.stream));
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(load_value(DataType::kFloat32, out.host, i), value(left, k.rank, i, 2)) << "element " << i;
    cudaEventDestroy(held);
    return;
  }
  SKIP_WITHOUT_GPU();
  run_as_processes(2, "shm");
}

TEST(GpuP2p, AKilledPeerFailsTheWorkNamingIt) {
  if (auto env = child_env()) {
    auto kr = join(*env, 20);
    ASSERT_TRUE(kr.ok()) << kr.status().to_string();
    Rank& k = kr.value();
    const int peer = 1 - k.rank;
    ASSERT_EQ(run_batch(k, {{P2PKind::kRecv, peer, 4096}, {P2PKind::kSend, peer, 4096}}, DataType::kFloat32, 1), "");
    if (k.rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 is waiting for it by then
      raise(SIGKILL);
    }
    Buffers out(1 << 22);
    P2POp op;
    op.kind = P2PKind::kRecv;
    op.options.output = dev_ref(out.dev, 1 << 22);
    op.options.count = (1 << 22) / sizeof(float);
    op.options.peer = 1;
    op.options.stream = k.stream;
    auto work = send_recv(*k.comm, std::span<const P2POp>(&op, 1));
    ASSERT_TRUE(work.ok()) << work.status().to_string();
    Status st = work.value().wait();
    EXPECT_FALSE(st.ok());
    EXPECT_MESSAGE_HAS(st, "rank 1");
    // The stream was released (nothing waits forever) and later device operations fail at once.
    EXPECT_EQ(cudaStreamSynchronize(k.stream), cudaSuccess);
    const auto t0 = std::chrono::steady_clock::now();
    auto again = send_recv(*k.comm, std::span<const P2POp>(&op, 1));
    Status later = again.ok() ? again.value().wait() : again.status();
    EXPECT_FALSE(later.ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << later.to_string();
    return;
  }
  SKIP_WITHOUT_GPU();
  run_as_processes(2, "tcp", {1});
}

// Ranks as threads of one process (which may share a GPU): the synchronous path, still correct.
TEST(GpuP2p, TwoThreadsOfOneProcessTakeTheSynchronousPath) {
  if (child_env()) return;
  SKIP_WITHOUT_GPU();
  auto store = make_memory_store();
  std::vector<std::string> failures(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      CommConfig config;
      config.transport = "shm";
      config.timeout_s = 60;
      config.name = "threads";
      cudaSetDevice(r % device_count());
      auto comm = Communicator::create(store, r, 2, config);
      if (!comm.ok()) {
        failures[r] = comm.status().to_string();
        return;
      }
      Rank k{r, 2, std::move(comm).value(), nullptr};
      cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking);
      for (size_t base : {size_t{1}, size_t{100003}})
        for (auto& [name, xs] : patterns(r, 2, base))
          if (failures[r].empty()) failures[r] = run_batch(k, xs, DataType::kFloat32, static_cast<int>(base));
      cudaStreamSynchronize(k.stream);
      cudaStreamDestroy(k.stream);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
}

}  // namespace
}  // namespace zw
