// A process that cannot start another thread gets an error from Communicator::create naming the thread and what to
// check, never an abort: std::thread's constructor throws std::system_error (EAGAIN) when pthread_create fails, which
// used to end the process (SIGABRT). Each trial runs in a child process whose address space is capped a few MiB
// above what it uses (RLIMIT_AS: a thread's 8 MiB stack no longer fits; a root process ignores RLIMIT_NPROC), for
// every transport and with monitoring on and off; the caps sweep from "nothing fits" to "everything fits".
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

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

}  // namespace
}  // namespace zw
