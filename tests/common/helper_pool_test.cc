// HelperPool (common/helper_pool.h): how jobs are cut, that every part runs exactly once and the call returns only
// after all of them, that the parts run on several threads, that concurrent callers never wait for each other's job
// (one runs alone), and that the helpers go to sleep and wake again.
#include "common/helper_pool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/topology.h"

namespace zw::internal {
namespace {

TEST(HelperPool, CutsOnlyJobsOfAtLeastTheSplitSize) {
  HelperPool off(1, 1 << 20, 0);
  EXPECT_EQ(off.parts_for(size_t{1} << 30), 1);
  HelperPool pool(4, 1 << 20, 0);
  EXPECT_EQ(pool.parts_for(0), 1);
  EXPECT_EQ(pool.parts_for((1 << 20) - 1), 1);
  EXPECT_EQ(pool.parts_for(1 << 20), 2);  // parts of at least half the split size
  EXPECT_EQ(pool.parts_for(3 << 19), 3);
  EXPECT_EQ(pool.parts_for(size_t{1} << 30), 4);
  using Job = HelperPool::Job;
  EXPECT_EQ(pool.parts_for((2 << 20) - 1, Job::kVmWrite), 1);  // a process_vm_writev: cut from twice the split size
  EXPECT_EQ(pool.parts_for(2 << 20, Job::kVmWrite), 4);
}

TEST(HelperPool, AutoSizeSharesTheCpusAmongTheHostsRanks) {
  EXPECT_EQ(HelperPool::auto_threads(16, 2), HelperPool::kAutoThreads);  // 8 per rank, capped
  EXPECT_EQ(HelperPool::auto_threads(16, 4), 4);
  EXPECT_EQ(HelperPool::auto_threads(16, 8), 2);
  EXPECT_EQ(HelperPool::auto_threads(12, 8), 1);  // fewer CPUs than two per rank: off
  EXPECT_EQ(HelperPool::auto_threads(2, 2), 1);   // the CI machine
  EXPECT_EQ(HelperPool::auto_threads(1, 1), 1);   // bound to one core (mpirun's default)
  EXPECT_EQ(HelperPool::auto_threads(3, 0), 3);   // no communicator seen yet: one rank
  EXPECT_EQ(HelperPool::auto_threads(2, 16), 1);  // more ranks than CPUs
}

TEST(HelperPool, ReadsACgroupCpuQuota) {
  EXPECT_EQ(cpus_of_quota("200000 100000"), 2);  // v2 cpu.max of `docker --cpus 2`
  EXPECT_EQ(cpus_of_quota("150000 100000"), 1);  // 1.5 CPUs: rounded down
  EXPECT_EQ(cpus_of_quota("50000 100000"), 1);   // half a CPU: still one
  EXPECT_EQ(cpus_of_quota("max 100000"), 0);     // no quota
  EXPECT_EQ(cpus_of_quota("-1 100000"), 0);      // v1: no quota
  EXPECT_EQ(cpus_of_quota(""), 0);               // nothing read
}

TEST(HelperPool, SplitCoversTheRangeOnceOnAlignedBoundariesAcrossThreads) {
  HelperPool pool(4, 4096, 1'000'000);
  for (size_t bytes : {size_t{4096}, size_t{5000}, size_t{65536 + 7}, size_t{1} << 20}) {
    std::vector<std::atomic<int>> hits(bytes);
    std::mutex mutex;
    std::set<std::thread::id> threads;
    std::vector<std::pair<size_t, size_t>> ranges;
    pool.split(bytes, 64, HelperPool::Job::kMapped, [&](size_t offset, size_t length) {
      for (size_t i = offset; i < offset + length; ++i) hits[i].fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // long enough for the helpers to take parts
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
      ranges.emplace_back(offset, length);
    });
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(hits[i].load(), 1) << "byte " << i << " of " << bytes;
    EXPECT_EQ(static_cast<int>(ranges.size()), pool.parts_for(bytes)) << bytes;
    for (auto [offset, length] : ranges) EXPECT_EQ(offset % 64, 0u) << bytes;
    if (pool.parts_for(bytes) > 1) {
      EXPECT_GT(threads.size(), 1u) << "the parts of " << bytes << " bytes ran on one thread";
    }
  }
  EXPECT_GE(pool.shared_jobs(), 3u);
}

// Many jobs back to back from several callers at once: each job's parts all ran when its call returned, none ran
// twice, and a caller that found the helpers busy ran its job alone instead of waiting.
TEST(HelperPool, ConcurrentCallersEachGetTheirWholeJobDone) {
  HelperPool pool(3, 1024, 200'000);
  constexpr int kCallers = 4, kJobs = 2000;
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      std::vector<uint8_t> buf(8192);
      for (int j = 0; j < kJobs; ++j) {
        const uint8_t v = static_cast<uint8_t>(c * 31 + j);
        pool.split(buf.size(), 64, HelperPool::Job::kVmWrite,
                   [&](size_t offset, size_t length) { std::memset(&buf[offset], v, length); });
        for (uint8_t b : buf) wrong += b != v;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(pool.shared_jobs() + pool.busy_jobs(), uint64_t{kCallers} * kJobs);
  EXPECT_GT(pool.shared_jobs(), 0u);
}

TEST(HelperPool, HelpersSleepAfterTheirSpinAndWakeForTheNextJob) {
  HelperPool pool(3, 1024, 10'000);  // 10 µs of polling, then asleep
  std::atomic<int> parts{0};
  for (int round = 0; round < 5; ++round) {
    std::set<std::thread::id> threads;
    std::mutex mutex;
    pool.run(3, [&](int) {
      parts.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    });
    EXPECT_GT(threads.size(), 1u) << "round " << round;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the helpers are asleep by now
  }
  EXPECT_EQ(parts.load(), 15);
}

// A child forked after the helpers started has no helper threads: its jobs run on the caller alone, without the
// lock of the job hand-off, which a helper may have held at the fork.
TEST(HelperPool, AChildForkedAfterTheHelpersStartedRunsItsJobsAlone) {
  HelperPool pool(3, 1024, 1'000'000);
  std::vector<uint8_t> buf(1 << 16);
  pool.split(buf.size(), 64, HelperPool::Job::kVmWrite,
             [&](size_t offset, size_t length) { std::memset(&buf[offset], 1, length); });
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pool.split(buf.size(), 64, HelperPool::Job::kVmWrite,
               [&](size_t offset, size_t length) { std::memset(&buf[offset], 2, length); });
    for (uint8_t b : buf)
      if (b != 2) _exit(1);
    _exit(0);
  }
  int status = 0;
  for (int i = 0; i < 500 && waitpid(child, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (waitpid(child, &status, WNOHANG) == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the forked child's job did not finish within 5 s";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace zw::internal
