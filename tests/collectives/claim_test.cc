// Operations run by the thread that waits for them ("claims", comm_impl.h): who runs what, strict issue order with
// several waiters, waits with a short timeout, waits from another thread, abort of a claimed operation that is
// blocked on a peer, and a communicator destroyed while a thread waits.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/comm_impl.h"
#include "tests/collectives/harness.h"

namespace zw::test {
namespace {

using internal::CommImpl;
using RunBy = CommImpl::RunBy;
using Clock = std::chrono::steady_clock;

CommConfig config(const std::string& transport, double timeout_s = 30) {
  CommConfig c;
  c.transport = transport;
  c.timeout_s = timeout_s;
  return c;
}

// Queues an operation that talks to no peer and runs `body` (a barrier description: every rank's own).
Work enqueue_local(Communicator& comm, std::function<void()> body, RunBy run_by = RunBy::kWorkerOrWaiter) {
  internal::OpDesc desc;
  return comm.impl().enqueue(
      desc, std::chrono::milliseconds(0),
      [body = std::move(body)](internal::OpContext&) {
        body();
        return Status();
      },
      run_by);
}

// A latch a queued operation blocks on, so that the test decides when the run token frees.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(m);
      open = true;
    }
    cv.notify_all();
  }
};

std::unique_ptr<Communicator> solo(const std::string& transport = "shm") {
  auto comm = Communicator::create(make_memory_store(), 0, 1, config(transport));
  EXPECT_TRUE(comm.ok()) << comm.status().to_string();
  return comm.ok() ? std::move(comm.value()) : nullptr;
}

// Issue-then-wait runs the operation in the waiting thread. The worker may still win a race now and then (the issuer
// preempted for longer than the claim grace on a loaded host), hence "most", never "none" as before claims.
TEST(ClaimTest, IssueThenWaitRunsInTheWaitingThread) {
  auto comm = solo();
  ASSERT_TRUE(comm);
  const int kOps = 200;
  int here = 0;
  for (int i = 0; i < kOps; ++i) {
    std::thread::id ran_on;
    Work w = enqueue_local(*comm, [&] { ran_on = std::this_thread::get_id(); });
    ASSERT_TRUE(w.wait().ok());
    here += ran_on == std::this_thread::get_id();
  }
  EXPECT_GE(here, kOps / 2) << "issue-then-wait should run in the caller's thread";
  EXPECT_EQ(comm->impl().run_counts().by_waiter, static_cast<uint64_t>(here));
}

// A wait shorter than the operation's own timeout must be able to return while the operation goes on: it never claims.
TEST(ClaimTest, ShortWaitLeavesTheOperationToTheWorker) {
  auto comm = solo();
  ASSERT_TRUE(comm);
  std::atomic<bool> ran_here{false};
  const auto me = std::this_thread::get_id();
  Work w = enqueue_local(*comm, [&] {
    ran_here = std::this_thread::get_id() == me;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  auto start = Clock::now();
  Status s = w.wait(std::chrono::milliseconds(20));
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(s.code(), Code::kTimeout) << s.to_string();
  EXPECT_NE(s.message().find("still running after 20 ms"), std::string::npos) << s.to_string();
  EXPECT_LT(secs, 0.25) << "a 20 ms wait blocked in the operation it claimed";
  EXPECT_TRUE(w.wait().ok());
  EXPECT_FALSE(ran_here.load());
}

// Several queued operations (some worker-only), several threads waiting for different ones at once, the token held
// at first: every operation runs exactly once, in issue order, and worker-only ones run on the worker.
TEST(ClaimTest, IssueOrderWithSeveralQueuedOperationsAndWaiters) {
  auto comm = solo();
  ASSERT_TRUE(comm);
  Gate gate;
  std::thread::id worker;
  Work first = enqueue_local(
      *comm,
      [&] {
        worker = std::this_thread::get_id();
        gate.wait();
      },
      RunBy::kWorker);
  const int kOps = 40;
  std::mutex m;
  std::vector<int> order;
  std::vector<bool> on_worker(kOps, false);
  std::vector<Work> works;
  for (int i = 0; i < kOps; ++i) {
    const RunBy by = i % 7 == 3 ? RunBy::kWorker : RunBy::kWorkerOrWaiter;
    works.push_back(enqueue_local(
        *comm,
        [&, i] {
          std::this_thread::sleep_for(std::chrono::microseconds((i * 37) % 200));
          std::lock_guard<std::mutex> lock(m);
          order.push_back(i);
          on_worker[i] = std::this_thread::get_id() == worker;
        },
        by));
  }
  std::vector<std::thread> waiters;
  std::atomic<int> failures{0};
  for (int target : {39, 5, 20, 12, 33, 0}) {
    waiters.emplace_back([&, target] {
      if (!works[target].wait().ok() || !works[target].test()) ++failures;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the waiters are asleep behind `first`
  gate.release();
  for (auto& t : waiters) t.join();
  for (const Work& w : works) ASSERT_TRUE(w.wait().ok());
  ASSERT_TRUE(first.wait().ok());
  EXPECT_EQ(failures.load(), 0);
  std::vector<int> want(kOps);
  for (int i = 0; i < kOps; ++i) want[i] = i;
  EXPECT_EQ(order, want);
  for (int i = 3; i < kOps; i += 7) EXPECT_TRUE(on_worker[i]) << "worker-only operation " << i << " ran elsewhere";
  auto counts = comm->impl().run_counts();
  EXPECT_EQ(counts.by_waiter + counts.by_worker, static_cast<uint64_t>(kOps + 1));
  EXPECT_GT(counts.by_waiter, 0u) << "no waiter claimed anything";
}

class ClaimTransportTest : public ::testing::TestWithParam<std::string> {};

// Real collectives issued by one thread and waited for by another (which then runs them): results are exact.
TEST_P(ClaimTransportTest, WaitFromAnotherThreadThanTheIssuer) {
  const int n = 3;
  run_ranks(n, config(GetParam()), [&](int r, Communicator& comm) {
    const size_t count = 1000;
    std::vector<float> in(count), out(count * n);
    for (int iter = 0; iter < 30; ++iter) {
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(r * 100000 + iter * 1000 + i % 1000);
      std::fill(out.begin(), out.end(), -1.0f);
      auto w = all_gather(comm, {MemRef::host(in.data(), count * 4), MemRef::host(out.data(), out.size() * 4), count,
                                 DataType::kFloat32});
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      Status s;
      if (iter % 2 == 0) {
        std::thread other([&] { s = w->wait(); });
        other.join();
      } else {
        s = w->wait();
      }
      ASSERT_TRUE(s.ok()) << s.to_string();
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < count; i += 97)
          ASSERT_EQ(out[p * count + i], static_cast<float>(p * 100000 + iter * 1000 + i % 1000)) << "rank " << r;
    }
    EXPECT_GT(comm.impl().run_counts().by_waiter, 0u);
  });
}

// A claimed operation blocked on a peer that never joins fails at once when another thread aborts the communicator.
// The token is held by a worker-only operation until the waiter is asleep, so the waiter is sure to claim the next.
TEST_P(ClaimTransportTest, AbortInterruptsAClaimedBlockedOperation) {
  run_ranks(2, config(GetParam(), 60), [&](int r, Communicator& comm) {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // never joins; stays alive meanwhile
      return;
    }
    Gate gate;
    Work hold = enqueue_local(
        comm, [&] { gate.wait(); }, RunBy::kWorker);
    std::vector<float> in(64, 1.0f), out(64);
    auto w = all_reduce(comm, {MemRef::host(in.data(), 256), MemRef::host(out.data(), 256), 64, DataType::kFloat32});
    ASSERT_TRUE(w.ok());
    Status s;
    auto start = Clock::now();
    std::thread waiter([&] { s = w->wait(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.release();
    while (comm.impl().run_counts().by_waiter == 0 && Clock::now() - start < std::chrono::seconds(5))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(comm.impl().run_counts().by_waiter, 1u) << "the waiting thread did not claim the all-reduce";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(w->test());
    comm.abort(Status(Code::kAborted, "stop now"));
    waiter.join();
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_TRUE(hold.wait().ok());
    EXPECT_EQ(s.code(), Code::kAborted) << s.to_string();
    EXPECT_NE(s.message().find("all_reduce"), std::string::npos) << s.to_string();
    EXPECT_LT(secs, 1.2) << "abort must not wait for the peer or the 60 s operation timeout";
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, ClaimTransportTest, ::testing::Values("shm", "tcp"));

// The communicator goes away while a thread waits for one of its queued operations: the operation still runs once,
// the waiter returns, and a wait after the destruction returns at once.
TEST(ClaimTest, DestroyedWhileAThreadWaits) {
  auto comm = solo();
  ASSERT_TRUE(comm);
  Gate gate;
  Work hold = enqueue_local(
      *comm, [&] { gate.wait(); }, RunBy::kWorker);
  std::atomic<int> runs{0};
  Work w = enqueue_local(*comm, [&] { ++runs; });
  Status s(Code::kInternal, "not waited");
  std::thread waiter([&] { s = w.wait(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate.release();
  });
  comm.reset();  // waits for the queue to drain
  waiter.join();
  release.join();
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_TRUE(w.wait().ok());
  EXPECT_TRUE(w.test());
  EXPECT_TRUE(hold.wait(std::chrono::milliseconds(1)).ok());
}

// Threads that poll and wait on a communicator's operations while it is destroyed: each either gets into the
// communicator before its runner detaches (and the destruction waits for it to leave) or finds it gone; none uses it
// afterwards (AddressSanitizer builds see the difference), none hangs, every wait returns the operation's status.
TEST(ClaimTest, PollersRacingTheDestructionNeverUseItAfterwards) {
  for (int round = 0; round < 50; ++round) {
    auto comm = solo();
    ASSERT_TRUE(comm);
    std::vector<Work> works;
    for (int i = 0; i < 8; ++i) works.push_back(enqueue_local(*comm, [] {}));
    std::atomic<bool> go{false};
    std::atomic<int> ok{0};
    std::vector<std::thread> pollers;
    for (size_t t = 0; t < 4; ++t)
      pollers.emplace_back([&, t] {
        while (!go.load()) std::this_thread::yield();
        for (size_t k = 0; k < 200; ++k) (void)works[(t + k) % works.size()].test();  // test() nudges the runner
        if (works[t].wait().ok()) ++ok;
      });
    go = true;
    comm.reset();
    for (auto& p : pollers) p.join();
    EXPECT_EQ(ok.load(), 4) << "round " << round;
    for (const Work& w : works) EXPECT_TRUE(w.test()) << "round " << round;
  }
}

// Worker-only operations, whose waiters sleep on the handle itself (not in the communicator), finishing while their
// waiters go to sleep: no wake-up is lost (a lost one leaves its wait at the 20 s deadline). finish() takes the
// handle's lock only when a sleeper counted itself in (work.cc).
TEST(ClaimTest, WorkerOnlyWaitsNeverMissTheEnd) {
  auto comm = solo();
  ASSERT_TRUE(comm);
  for (int round = 0; round < 200; ++round) {
    std::vector<Work> works;
    for (int i = 0; i < 4; ++i)
      works.push_back(enqueue_local(
          *comm, [] {}, RunBy::kWorker));
    std::atomic<int> late{0};
    std::vector<std::thread> waiters;
    for (const Work& w : works)
      waiters.emplace_back([&late, w] {
        if (!w.wait(std::chrono::seconds(20)).ok()) ++late;
      });
    for (auto& t : waiters) t.join();
    ASSERT_EQ(late.load(), 0) << "round " << round;
  }
}

}  // namespace
}  // namespace zw::test
