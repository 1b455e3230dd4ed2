// Work handles.
#include "collectives/work.h"

#include <thread>

#include "common/clock.h"
#include "zerowire/communicator.h"

namespace zw {
namespace internal {

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void WorkState::mark_started() { mark_started(steady_ns()); }

void WorkState::mark_started(int64_t now_ns) { started_ns_.store(now_ns, std::memory_order_relaxed); }

OpTiming WorkState::timing() const {
  if (!done_.load(std::memory_order_acquire)) return OpTiming{};  // finished_ns_ is written before done_ is released
  const int64_t start = started_ns_.load(std::memory_order_relaxed);
  if (finished_ns_ == 0 || start == 0) return OpTiming{};
  return OpTiming{start, finished_ns_};
}

void WorkState::finish(Status status) { finish(std::move(status), steady_ns()); }

void WorkState::finish(Status status, int64_t end) {
  // No lock unless someone sleeps on cv_ (wait_for_finish: worker-only operations, or a wait after the communicator
  // went; a queued operation's waiters sleep in the communicator): that sleeper counted itself in sleepers_ before it
  // last looked at done_, and this looks at sleepers_ after storing done_ (both sequentially consistent), so either it
  // sees done_ or this sees it and wakes it under the mutex it waits with.
  finished_ns_ = end;
  status_ = std::move(status);
  done_.store(true, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    cv_.notify_all();
  }
}

bool WorkState::poll_once() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_.load(std::memory_order_acquire)) return true;
  std::optional<Status> result = poller_->poll();
  if (!result) return false;
  status_ = std::move(*result);
  done_.store(true, std::memory_order_release);
  return true;
}

bool WorkState::done() const {
  if (done_.load(std::memory_order_acquire)) return true;
  return polled_ && poll_once();
}

bool WorkState::test() const {
  if (done()) return true;
  if (runner_) runner_->nudge();
  return done();
}

bool WorkState::wait_until(std::chrono::steady_clock::time_point deadline) const {
  if (runner_) return runner_->wait(*this, seq_, deadline);
  return wait_for_finish(deadline);
}

bool WorkState::wait_for_finish(std::chrono::steady_clock::time_point deadline) const {
  if (polled_) {
    // Polled completion: spin briefly (GPU ops often end within microseconds), then nap between polls.
    for (int spins = 0;; ++spins) {
      if (done()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      if (spins < 200)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  const bool finished =
      cv_.wait_until(lock, deadline, [&] { return done_.load(std::memory_order_seq_cst); });  // see finish()
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  return finished;
}

Status WorkState::status() const {
  // status_ is written once, before done_ is released, and never after: read once done, without a lock. Before that
  // it is OK, as it always was (the waits call this only after the operation finished).
  return done_.load(std::memory_order_acquire) ? status_ : Status();
}

}  // namespace internal

Status Work::wait() const {
  if (!state_) return Status();
  state_->wait_until(std::chrono::steady_clock::time_point::max());
  return state_->status();
}

Status Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return Status();
  if (!state_->wait_until(Deadline::after(timeout).time_point()))  // milliseconds::max(): no limit
    return Status(Code::kTimeout, "operation still running after " + std::to_string(timeout.count()) + " ms");
  return state_->status();
}

bool Work::test() const { return !state_ || state_->test(); }

OpTiming Work::timing() const { return state_ ? state_->timing() : OpTiming{}; }

}  // namespace zw
