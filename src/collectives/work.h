// Completion state shared by a Work handle and the worker that runs the operation.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "zerowire/status.h"

namespace zw::internal {

// How long the worker polls for the next operation before it sleeps: back-to-back operations then skip a futex
// sleep/wake pair, which costs tens of microseconds on a loaded VM (blocking 1-rank all-reduce: 42 → 10 µs).
inline constexpr std::chrono::microseconds kPollBeforeSleep{100};

// Polls `ready` (yielding the CPU between polls) for up to kPollBeforeSleep; returns whether it became true.
template <typename F>
bool poll_briefly(const F& ready) {
  const auto until = std::chrono::steady_clock::now() + kPollBeforeSleep;
  do {
    if (ready()) return true;
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  return ready();
}

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
