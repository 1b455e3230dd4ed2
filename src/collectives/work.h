// Completion state shared by a Work handle and the worker that runs the operation.
#pragma once

#include <condition_variable>
#include <mutex>

#include "zerowire/status.h"

namespace zw::internal {

// Thread-safe: the worker calls finish() once; any thread may wait.
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
  bool done_ = false;
  Status status_;
};

}  // namespace zw::internal
