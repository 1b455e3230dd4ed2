// Running out of threads or host memory gives errors, never an abort. Each trial runs in a child process whose
// address space is capped a few MiB above what it uses (RLIMIT_AS; a root process ignores RLIMIT_NPROC), the caps
// sweeping from "nothing fits" to "everything fits":
//  - Communicator::create, per transport, monitored or not: std::thread's constructor throws std::system_error when
//    pthread_create fails (no room for the 8 MiB stack), which used to end the process (SIGABRT);
//  - collectives of 4 ranks (threads of the child) capped after creation: a std::bad_alloc in the monitor's counting
//    thread ended the process; every rank must return, each OK or with OUT_OF_MEMORY or ABORTED.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "zerowire/communicator.h"

namespace zw {
namespace {

// This process's virtual size, KiB.
long vm_size_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::atol(line.c_str() + 7);
  return 0;
}

enum Outcome { kCreated = 0, kThreadError = 10, kOtherError = 11 };

// In a child capped at its current size + extra_mib: create a world-size-1 communicator. The exit code is the Outcome
// (a signal: it crashed).
int trial(const std::string& transport, int monitor, int extra_mib) {
  const pid_t child = ::fork();
  if (child == 0) {
    const rlim_t cap = rlim_t(vm_size_kib() + extra_mib * 1024L) * 1024;
    const rlimit limit{cap, cap};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(12);
    CommConfig config;
    config.transport = transport;
    config.monitor = monitor;
    auto comm = Communicator::create(make_memory_store(), 0, 1, config);
    if (comm.ok()) ::_exit(kCreated);
    const bool thread = comm.status().message().find("cannot start") != std::string::npos &&
                        comm.status().message().find("ulimit -u") != std::string::npos;
    ::_exit(thread ? kThreadError : kOtherError);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}

TEST(ThreadLimit, CommunicatorCreationFailsWithAnErrorNotAnAbort) {
  for (const char* transport : {"shm", "tcp"})
    for (int monitor : {0, 1}) {
      SCOPED_TRACE(std::string(transport) + (monitor ? ", monitored" : ", unmonitored"));
      bool created = false, thread_error = false;
      for (int extra = 0; extra <= 512 && !created; extra += 4) {
        const int outcome = trial(transport, monitor, extra);
        ASSERT_GE(outcome, 0) << "the child died of signal " << -outcome << " at +" << extra << " MiB";
        ASSERT_NE(outcome, 12) << "setrlimit failed";
        created = outcome == kCreated;
        thread_error = thread_error || outcome == kThreadError;
      }
      EXPECT_TRUE(created) << "no cap up to +512 MiB let the communicator start";
      EXPECT_TRUE(thread_error) << "no cap failed on a thread: the sweep did not reach the thread starts";
    }
}

// In a child: 4 ranks (threads) create their communicators, then the child's address space is capped at its size +
// extra_mib and every rank runs an all_gather of 1 Mi floats per rank and an all_reduce of 4 Mi floats. The exit code
// is 0 when every rank returned OK or with OUT_OF_MEMORY / ABORTED, 1 for any other outcome (a signal: it crashed).
int capped_collectives(int extra_mib) {
  const pid_t child = ::fork();
  if (child == 0) {
    constexpr int kRanks = 4;
    constexpr size_t kCount = size_t{1} << 20;
    const auto store = make_memory_store();
    std::vector<std::vector<float>> in(kRanks, std::vector<float>(4 * kCount, 1.f)),
        out(kRanks, std::vector<float>(4 * kCount));
    std::vector<Code> codes(kRanks * 2, Code::kInternal);
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> ranks;
    for (int r = 0; r < kRanks; ++r)
      ranks.emplace_back([&, r] {
        CommConfig config;
        config.transport = "shm";
        auto comm = Communicator::create(store, r, kRanks, config);
        ready.fetch_add(1);
        while (!go.load()) std::this_thread::yield();
        if (!comm.ok()) return;
        CollectiveOptions o;
        o.dtype = DataType::kFloat32;
        o.input = MemRef{in[size_t(r)].data(), kCount * sizeof(float)};
        o.output = MemRef{out[size_t(r)].data(), 4 * kCount * sizeof(float)};
        o.count = kCount;
        Result<Work> gather = all_gather(**comm, o);
        codes[size_t(r) * 2] = (gather.ok() ? gather->wait() : gather.status()).code();
        o.input = MemRef{in[size_t(r)].data(), 4 * kCount * sizeof(float)};
        o.count = 4 * kCount;
        Result<Work> reduce = all_reduce(**comm, o);
        codes[size_t(r) * 2 + 1] = (reduce.ok() ? reduce->wait() : reduce.status()).code();
      });
    while (ready.load() < kRanks) std::this_thread::yield();
    const rlim_t cap = rlim_t(vm_size_kib() + extra_mib * 1024L) * 1024;
    const rlimit limit{cap, cap};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(12);
    go.store(true);
    for (std::thread& t : ranks) t.join();
    for (Code c : codes)
      if (c != Code::kOk && c != Code::kOutOfMemory && c != Code::kAborted) ::_exit(1);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}

TEST(MemoryLimit, CollectivesFailWithErrorsNotAnAbort) {
  for (int extra : {0, 2, 4, 8, 16, 32, 64}) {
    const int outcome = capped_collectives(extra);
    ASSERT_GE(outcome, 0) << "the child died of signal " << -outcome << " at +" << extra << " MiB";
    EXPECT_EQ(outcome, 0) << "at +" << extra
                          << " MiB a rank returned something other than OK, OUT_OF_MEMORY or ABORTED";
  }
}

}  // namespace
}  // namespace zw
