// Work handles.
#include "collectives/work.h"

#include "zerowire/communicator.h"

namespace zw {
namespace internal {

void WorkState::finish(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool WorkState::done() const { return done_.load(std::memory_order_acquire); }

bool WorkState::wait_until(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_until(lock, deadline, [&] { return done(); });
}

Status WorkState::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

}  // namespace internal

Status Work::wait() const {
  if (!state_) return Status();
  state_->wait_until(std::chrono::steady_clock::time_point::max());
  return state_->status();
}

Status Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return Status();
  if (!state_->wait_until(std::chrono::steady_clock::now() + timeout))
    return Status(Code::kTimeout, "operation still running after " + std::to_string(timeout.count()) + " ms");
  return state_->status();
}

bool Work::test() const { return !state_ || state_->done(); }

}  // namespace zw
