// tests/gpu/gpu_collectives_errors_test.cc — device-memory collectives that must fail, and fail at once, naming the
// ranks: desynchronized ranks, a usage error on one rank only (also as its first device-memory call), a count of 0 on
// one rank, a rank that never arrives, mixed host and device buffers, two ranks of one process on one GPU issuing on streams that serialize;
// and the IPC cache across freed and reallocated buffers.
//
// Ranks run as threads (one communicator each); part of the zw_gpu_collectives_test binary (the worlds of every
// collective against the host reference are in gpu_collectives_test.cc). Skips with "no CUDA device" without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/gpu_test_util.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw {
namespace {

using gpu_test::device_count;

// Runs fn on n rank threads with a short timeout; each gets a device buffer of `bytes` and a stream.
void run_gpu_ranks(int n, double timeout_s, size_t bytes,
                   const std::function<void(int, Communicator&, std::byte*, cudaStream_t)>& fn) {
  auto store = make_memory_store();
  const int ndev = device_count();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(r % ndev);
      cudaStream_t s = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      std::byte* buf = nullptr;
      ASSERT_EQ(cudaMalloc(&buf, bytes), cudaSuccess);
      CommConfig config;
      config.timeout_s = timeout_s;
      auto comm = Communicator::create(store, r, n, config);
      ASSERT_TRUE(comm.ok()) << comm.status().to_string();
      fn(r, *comm.value(), buf, s);
      comm.value().reset();
      cudaFree(buf);
      cudaStreamDestroy(s);
    });
  }
  for (auto& t : threads) t.join();
}

// 1,024 floats on GPU 0 issued on stream s: the input at buf, an output of out_bytes at buf + out_offset.
CollectiveOptions device_floats(std::byte* buf, cudaStream_t s, size_t out_bytes = 4096, size_t out_offset = 65536) {
  CollectiveOptions o;
  o.input = MemRef{buf, 4096, MemKind::kCudaDevice, 0};
  o.output = MemRef{buf + out_offset, out_bytes, MemKind::kCudaDevice, 0};
  o.count = 1024;
  o.stream = s;
  return o;
}

// Rank 1 passes a null input to the all_reduce `o` describes, the others `o` itself: within `limit_s` rank 1 fails
// with its usage error and every other rank with kAborted naming rank 1 and the reason.
void expect_refusal_on_rank_1_fails_every_rank(int r, Communicator& comm, const CollectiveOptions& o, double limit_s) {
  CollectiveOptions bad = o;
  if (r == 1) bad.input = MemRef{nullptr, 0, MemKind::kCudaDevice, 0};
  const auto start = std::chrono::steady_clock::now();
  Result<Work> w = all_reduce(comm, bad);
  Status st = w.ok() ? w.value().wait(std::chrono::seconds(60)) : w.status();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(st.ok());
  EXPECT_LT(secs, limit_s) << st.to_string();
  if (r == 1) {
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.to_string();
  } else {
    EXPECT_EQ(st.code(), Code::kAborted) << st.to_string();
    EXPECT_NE(st.message().find("rank 1 refused"), std::string::npos) << st.to_string();
    EXPECT_NE(st.message().find("input buffer is null"), std::string::npos) << st.to_string();
  }
}

TEST(GpuCollectivesErrors, DifferentOperationsNameBothRanks) {
  SKIP_WITHOUT_GPU();
  run_gpu_ranks(2, 20, 1 << 20, [](int r, Communicator& comm, std::byte* buf, cudaStream_t s) {
    CollectiveOptions o = device_floats(buf, s, 8192);
    Result<Work> w = r == 0 ? all_gather(comm, o) : all_reduce(comm, o);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), Code::kDesync) << w.status().to_string();
    EXPECT_NE(w.status().message().find("all_gather"), std::string::npos) << w.status().to_string();
    EXPECT_NE(w.status().message().find("all_reduce"), std::string::npos) << w.status().to_string();
    EXPECT_NE(w.status().message().find(r == 0 ? "rank 1" : "rank 0"), std::string::npos) << w.status().to_string();
  });
}

// A usage error on one rank only: its peers used to wait for its descriptor until ZW_TIMEOUT. Now the refusal is posted
// in the descriptor mailbox and they fail at once naming it and why; their GPU path then fails for good, and they
// post that for the next call, so the refusing rank does not wait for them either.
TEST(GpuCollectivesErrors, ARefusalOnOneRankFailsItsPeersAtOnce) {
  SKIP_WITHOUT_GPU();
  run_gpu_ranks(3, 30, 1 << 20, [](int r, Communicator& comm, std::byte* buf, cudaStream_t s) {
    CollectiveOptions o = device_floats(buf, s);
    Result<Work> first = all_reduce(comm, o);  // the GPU engine exists on every rank from here on
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    ASSERT_TRUE(first.value().wait(std::chrono::seconds(60)).ok());
    // The timeout is 30 s.
    ASSERT_NO_FATAL_FAILURE(expect_refusal_on_rank_1_fails_every_rank(r, comm, o, 5.0));
    // The next call: ranks 0 and 2 failed for good; rank 1 learns it from their mailbox instead of timing out.
    const auto again = std::chrono::steady_clock::now();
    Result<Work> next = all_reduce(comm, o);
    Status nst = next.ok() ? next.value().wait(std::chrono::seconds(60)) : next.status();
    EXPECT_FALSE(nst.ok());
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count(), 5.0) << nst.to_string();
    if (r == 1) {
      EXPECT_NE(nst.message().find("refused its call of GPU operation"), std::string::npos) << nst.to_string();
    }
  });
}

// Host memory passed as device memory on one rank: refused where the buffer's GPU is looked up (run_gpu_collective),
// announced like the argument checks' refusals.
TEST(GpuCollectivesErrors, HostMemoryPassedAsDeviceMemoryOnOneRankFailsItsPeerAtOnce) {
  SKIP_WITHOUT_GPU();
  run_gpu_ranks(2, 30, 1 << 20, [](int r, Communicator& comm, std::byte* buf, cudaStream_t s) {
    CollectiveOptions o = device_floats(buf, s);
    Result<Work> first = all_reduce(comm, o);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    ASSERT_TRUE(first.value().wait(std::chrono::seconds(60)).ok());
    std::vector<std::byte> host(8192);
    CollectiveOptions bad = o;
    if (r == 1) bad.input = bad.output = MemRef{host.data(), 4096, MemKind::kCudaDevice, 0};
    const auto start = std::chrono::steady_clock::now();
    Result<Work> w = all_reduce(comm, bad);
    Status st = w.ok() ? w.value().wait(std::chrono::seconds(60)) : w.status();
    ASSERT_FALSE(st.ok());
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0) << st.to_string();
    if (r == 0) {
      EXPECT_NE(st.message().find("rank 1 refused"), std::string::npos) << st.to_string();
      EXPECT_NE(st.message().find("not CUDA device memory"), std::string::npos) << st.to_string();
    }
  });
}

// Every rank makes the same mistake: each refuses, nobody waits for anybody, and the GPU path stays usable.
TEST(GpuCollectivesErrors, TheSameRefusalOnEveryRankLeavesTheGpuPathUsable) {
  SKIP_WITHOUT_GPU();
  run_gpu_ranks(2, 30, 1 << 20, [](int, Communicator& comm, std::byte* buf, cudaStream_t s) {
    CollectiveOptions o = device_floats(buf, s);
    for (int i = 0; i < 6; ++i) {  // more refusals than the mailbox has slots
      Result<Work> w = all_reduce(comm, o);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      ASSERT_TRUE(w.value().wait(std::chrono::seconds(60)).ok());
      CollectiveOptions bad = o;
      bad.input = MemRef{nullptr, 0, MemKind::kCudaDevice, 0};
      Result<Work> refused = all_reduce(comm, bad);
      ASSERT_FALSE(refused.ok());
      EXPECT_EQ(refused.status().code(), Code::kInvalidArgument) << refused.status().to_string();
    }
  });
}

// A rank's first device-memory call refused (a usage error) while its peers' calls are valid: they wait for it in the
// creation of the GPU engine, where the refusal is published; they fail at once naming it and why, and the next calls,
// valid everywhere, set the engine up afresh and run.
TEST(GpuCollectivesErrors, ARefusalOfTheFirstDeviceCallFailsItsPeersAtOnce) {
  SKIP_WITHOUT_GPU();
  run_gpu_ranks(3, 30, 1 << 20, [](int r, Communicator& comm, std::byte* buf, cudaStream_t s) {
    CollectiveOptions o = device_floats(buf, s);
    // The timeout is 30 s; the peers' first call also sets the engine up.
    ASSERT_NO_FATAL_FAILURE(expect_refusal_on_rank_1_fails_every_rank(r, comm, o, 10.0));
    Result<Work> next = all_reduce(comm, o);
    ASSERT_TRUE(next.ok()) << next.status().to_string();
    EXPECT_TRUE(next.value().wait(std::chrono::seconds(60)).ok());
  });
}

// Every rank refuses its first device-memory call the same way: nobody waits, and the next call sets up and runs.
TEST(GpuCollectivesErrors, TheSameRefusalOfTheFirstDeviceCallOnEveryRankLeavesTheGpuPathUsable) {
  SKIP_WITHOUT_GPU();
  run_gpu_ranks(2, 30, 1 << 20, [](int, Communicator& comm, std::byte* buf, cudaStream_t s) {
    CollectiveOptions o = device_floats(buf, s);
    CollectiveOptions bad = o;
    bad.input = MemRef{nullptr, 0, MemKind::kCudaDevice, 0};
    for (int i = 0; i < 3; ++i) {
      const auto start = std::chrono::steady_clock::now();
      Result<Work> refused = all_reduce(comm, bad);
      ASSERT_FALSE(refused.ok());
      EXPECT_EQ(refused.status().code(), Code::kInvalidArgument) << refused.status().to_string();
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
    }
    Result<Work> w = all_reduce(comm, o);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_TRUE(w.value().wait(std::chrono::seconds(60)).ok());
  });
}

// A count of 0 on one rank and 1,024 on the others, as the first device-memory call and after one: the ranks meet and
// every one fails at once naming a rank that passed another count, instead of the others waiting for the rank that
// had nothing to move. Before it, a count of 0 on every rank meets the peers and launches nothing. Each step's failure
// says which step it was (a hang of one of them was seen once on the H200 and not yet told apart).
void count_of_zero_on_one_rank(bool engine_first) {
  run_gpu_ranks(3, 30, 1 << 20, [&](int r, Communicator& comm, std::byte* buf, cudaStream_t s) {
    CollectiveOptions o = device_floats(buf, s, 3 * 4096);
    if (engine_first) {
      Result<Work> first = all_gather(comm, o);
      ASSERT_TRUE(first.ok()) << "rank " << r << ", the valid all_gather: " << first.status().to_string();
      Status fst = first.value().wait(std::chrono::seconds(60));
      ASSERT_TRUE(fst.ok()) << "rank " << r << ", the valid all_gather: " << fst.to_string();
    }
    CollectiveOptions empty = o;
    empty.count = 0;
    empty.input = MemRef{nullptr, 0, MemKind::kCudaDevice, 0};
    empty.output = MemRef{nullptr, 0, MemKind::kCudaDevice, 0};
    Result<Work> none = all_gather(comm, empty);
    ASSERT_TRUE(none.ok()) << "rank " << r << ", count 0 on every rank: " << none.status().to_string();
    Status nst = none.value().wait(std::chrono::seconds(60));
    ASSERT_TRUE(nst.ok()) << "rank " << r << ", count 0 on every rank: " << nst.to_string();
    const auto start = std::chrono::steady_clock::now();
    Result<Work> w = all_gather(comm, r == 1 ? empty : o);
    Status st = w.ok() ? w.value().wait(std::chrono::seconds(60)) : w.status();
    ASSERT_FALSE(st.ok()) << "rank " << r << ", count 0 on rank 1 only, returned OK";
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0)
        << st.to_string();  // the timeout is 30 s
    EXPECT_EQ(st.code(), Code::kDesync) << st.to_string();
    EXPECT_NE(st.message().find(r == 1 ? "rank 0" : "rank 1"), std::string::npos) << st.to_string();
  });
}

TEST(GpuCollectivesErrors, ACountOfZeroOnOneRankAsTheFirstCallFailsEveryRankAtOnce) {
  SKIP_WITHOUT_GPU();
  count_of_zero_on_one_rank(false);
}

TEST(GpuCollectivesErrors, ACountOfZeroOnOneRankFailsEveryRankAtOnce) {
  SKIP_WITHOUT_GPU();
  count_of_zero_on_one_rank(true);
}

TEST(GpuCollectivesErrors, ARankThatNeverArrivesIsNamedAtTheTimeout) {
  SKIP_WITHOUT_GPU();
  run_gpu_ranks(3, 2, 1 << 20, [](int r, Communicator& comm, std::byte* buf, cudaStream_t s) {
    CollectiveOptions o = device_floats(buf, s, 4096, 0);
    if (r == 2) return;  // never issues the operation
    Result<Work> w = all_reduce(comm, o);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), Code::kTimeout) << w.status().to_string();
    EXPECT_NE(w.status().message().find("rank 2"), std::string::npos) << w.status().to_string();
  });
}

TEST(GpuCollectivesErrors, MixedHostAndDeviceBuffersAreRejected) {
  SKIP_WITHOUT_GPU();
  run_gpu_ranks(1, 5, 4096, [](int, Communicator& comm, std::byte* buf, cudaStream_t s) {
    std::vector<float> host(1024);
    CollectiveOptions o = device_floats(buf, s, 4096, 0);
    o.input = MemRef::host(host.data(), 4096);
    Result<Work> w = all_reduce(comm, o);
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find("host memory but output is"), std::string::npos) << w.status().to_string();
  });
}

TEST(GpuCollectivesCache, FreedAndReallocatedBuffersAreMappedAfresh) {
  SKIP_WITHOUT_GPU();
  // Each round frees and reallocates the buffers (often at the same address) with new contents: a stale
  // mapping of the old allocation would return old data. Each rank on its own non-blocking stream: on one GPU the
  // two ranks share it, where the legacy default stream would run one rank's kernel behind the other's.
  auto store = make_memory_store();
  const int n = 2, ndev = device_count();
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(r % ndev);
      cudaStream_t s = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      CommConfig config;
      config.timeout_s = 30;
      auto comm = Communicator::create(store, r, n, config);
      if (!comm.ok()) {
        failures[r] = comm.status().to_string();
        return;
      }
      for (int round = 0; round < 6 && failures[r].empty(); ++round) {
        const size_t count = 1000 + round;
        float* in = nullptr;
        float* out = nullptr;
        cudaMalloc(&in, count * 4);
        cudaMalloc(&out, count * 4 * n);
        std::vector<float> host(count, static_cast<float>(100 * round + r));
        cudaMemcpyAsync(in, host.data(), count * 4, cudaMemcpyHostToDevice, s);
        CollectiveOptions o;
        o.input = MemRef{in, count * 4, MemKind::kCudaDevice, r % ndev};
        o.output = MemRef{out, count * 4 * n, MemKind::kCudaDevice, r % ndev};
        o.count = count;
        o.stream = s;
        auto w = all_gather(*comm.value(), o);
        Status st = w.ok() ? w.value().wait(std::chrono::seconds(60)) : w.status();
        std::vector<float> got(count * n);
        cudaMemcpyAsync(got.data(), out, count * 4 * n, cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        if (!st.ok()) failures[r] = st.to_string();
        for (size_t i = 0; i < got.size() && failures[r].empty(); ++i)
          if (got[i] != static_cast<float>(100 * round + static_cast<int>(i / count)))
            failures[r] =
                "round " + std::to_string(round) + ": element " + std::to_string(i) + " = " + std::to_string(got[i]);
        // Both ranks are done with this round's buffers before either frees them.
        auto b = barrier(*comm.value());
        if (b.ok()) (void)b.value().wait();
        cudaFree(in);
        cudaFree(out);
      }
      comm.value().reset();
      cudaStreamDestroy(s);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
}

// Two ranks of this process on GPU 0 (whatever the GPU count), issuing on the legacy default stream, or one there
// and one on a stream that synchronizes with it: one rank's kernel would be queued behind the other's, which waits
// for it, until the timeout (GpuComm::check_streams). Both refuse at once with an error naming both ranks. On their
// own non-blocking streams the same all-gather runs and gathers both blocks.
TEST(GpuCollectivesErrors, RanksSharingAGpuAndAStreamAreRefused) {
  SKIP_WITHOUT_GPU();
  enum class Streams { kBothLegacy, kLegacyAndBlocking, kOwnNonBlocking };
  for (Streams mode : {Streams::kBothLegacy, Streams::kLegacyAndBlocking, Streams::kOwnNonBlocking}) {
    SCOPED_TRACE(mode == Streams::kBothLegacy          ? "both on the legacy stream"
                 : mode == Streams::kLegacyAndBlocking ? "legacy and blocking"
                                                       : "own non-blocking streams");
    auto store = make_memory_store();
    std::vector<std::string> failures(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        cudaSetDevice(0);
        cudaStream_t s = nullptr;  // the legacy default stream
        if (mode == Streams::kOwnNonBlocking) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (mode == Streams::kLegacyAndBlocking && r == 1) cudaStreamCreateWithFlags(&s, cudaStreamDefault);
        const size_t count = 1024;
        float* buf = nullptr;
        cudaMalloc(&buf, 3 * count * 4);
        std::vector<float> host(count, static_cast<float>(r + 1)), got(2 * count);
        cudaMemcpyAsync(buf, host.data(), count * 4, cudaMemcpyHostToDevice, s);
        CommConfig config;
        config.timeout_s = 10;  // without the check: a 10 s wait, then a timeout error
        auto comm = Communicator::create(store, r, 2, config);
        if (!comm.ok()) {
          failures[r] = comm.status().to_string();
          return;
        }
        CollectiveOptions o;
        o.input = MemRef{buf, count * 4, MemKind::kCudaDevice, 0};
        o.output = MemRef{buf + count, 2 * count * 4, MemKind::kCudaDevice, 0};
        o.count = count;
        o.stream = s;
        auto w = all_gather(*comm.value(), o);
        Status st = w.ok() ? w.value().wait(std::chrono::seconds(30)) : w.status();
        cudaMemcpyAsync(got.data(), buf + count, 2 * count * 4, cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        if (mode == Streams::kOwnNonBlocking) {
          if (!st.ok()) failures[r] = st.to_string();
          for (size_t i = 0; i < got.size() && failures[r].empty(); ++i)
            if (got[i] != static_cast<float>(i / count + 1)) failures[r] = "element " + std::to_string(i) + " wrong";
        } else if (st.code() != Code::kInvalidArgument || st.message().find("rank 0 and rank 1") == std::string::npos ||
                   st.message().find("stream") == std::string::npos) {
          failures[r] = "not refused as two ranks sharing a stream: " + st.to_string();
        }
        comm.value().reset();
        cudaFree(buf);
        if (s != nullptr) cudaStreamDestroy(s);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
  }
}
}  // namespace
}  // namespace zw
