// common/thread.h — starting a thread as a Result: std::thread's constructor throws std::system_error when the
// process cannot get another thread (EAGAIN: `ulimit -u`, a container's pids limit, or no address space left for the
// stack under `ulimit -v`), which would end the process; start_thread returns an error saying which thread and what
// to check instead.
// Non-goals: thread pools, naming or pinning threads (helper_pool.h, topology.h).
#pragma once

#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "zerowire/status.h"

namespace zw {

// The error for a thread `what` ("the communicator's worker thread") that could not start.
Status thread_start_error(std::string_view what, const std::system_error& e);

template <typename F>
Result<std::thread> start_thread(std::string_view what, F&& body) {
  try {
    return std::thread(std::forward<F>(body));
  } catch (const std::system_error& e) {
    return thread_start_error(what, e);
  }
}

}  // namespace zw
