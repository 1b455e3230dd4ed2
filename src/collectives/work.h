// Completion state shared by a Work handle and the worker that runs the operation.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "zerowire/status.h"

namespace zw::internal {

// Thread-safe: the worker calls finish() once; any thread may wait (it sleeps on a condition variable: a
// waiter that polled would compete for the cores the ranks' workers need — measured 27 µs instead of 9 µs per
// blocking 2-rank all-reduce with both ranks as threads on 2 cores).
class WorkState {
 public:
  void finish(Status status);
  bool done() const;
  // Waits until finished or `deadline`; returns false on timeout.
  bool wait_until(std::chrono::steady_clock::time_point deadline) const;
  Status status() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  std::atomic<bool> done_{false};
  Status status_;  // written before done_ is released
};

}  // namespace zw::internal
