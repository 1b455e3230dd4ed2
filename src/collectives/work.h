// Completion state shared by a Work handle and the thread that runs the operation (the communicator's worker, or
// a thread waiting for it: see WorkRunner).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "zerowire/communicator.h"
#include "zerowire/status.h"

namespace zw::internal {

// How a WorkState learns that an operation finished when no thread will call finish() (GPU operations complete on
// a stream): poll() returns the final status once the operation is over, nullopt while it runs. Called under the
// state's lock, from whichever thread tests or waits.
class WorkPoller {
 public:
  virtual ~WorkPoller() = default;
  virtual std::optional<Status> poll() = 0;
};

class WorkState;

// How a thread waiting for a queued operation gets it run (the communicator implements it): instead of sleeping
// until the worker thread has run the operation, the waiter runs queued operations itself, in issue order, when
// nobody else is running one. The common issue-then-wait pattern then costs no thread hand-off. Thread-safe.
class WorkRunner {
 public:
  virtual ~WorkRunner() = default;
  // Waits until `work` (sequence number `seq`) finished or `deadline`; returns false on timeout.
  virtual bool wait(const WorkState& work, uint64_t seq, std::chrono::steady_clock::time_point deadline) = 0;
  // Someone polls `work` without waiting: the worker must run it (test() never blocks).
  virtual void nudge() = 0;
};

// Thread-safe: whoever runs the operation calls finish() once, or a poller reports completion; any thread may wait.
// Waiters of queued operations go through the runner (they run the operation, or sleep until it ends); waiters of
// other worker-run operations sleep on a condition variable (a waiter that polled would compete for the cores the
// ranks' workers need — measured 27 µs instead of 9 µs per blocking 2-rank all-reduce with both ranks as threads on
// 2 cores); waiters of polled operations poll, since nothing else would wake them.
class WorkState {
 public:
  WorkState() = default;
  explicit WorkState(std::unique_ptr<WorkPoller> poller) : poller_(std::move(poller)), polled_(poller_ != nullptr) {}
  // An operation queued on a communicator as number `seq`; waits go through `runner`.
  WorkState(std::shared_ptr<WorkRunner> runner, uint64_t seq) : runner_(std::move(runner)), seq_(seq) {}
  void finish(Status status);
  // finish() with the end time already read (steady-clock ns).
  void finish(Status status, int64_t end_ns);
  bool done() const;
  // done(), and nudges the runner when not done (Work::test()).
  bool test() const;
  // Waits until finished or `deadline` (through the runner, if any); returns false on timeout.
  bool wait_until(std::chrono::steady_clock::time_point deadline) const;
  // Sleeps until finish() or `deadline`, never running anything (the runner's fallback); false on timeout.
  bool wait_for_finish(std::chrono::steady_clock::time_point deadline) const;
  Status status() const;  // the operation's outcome once done (OK before)
  // Records that the operation starts running now (steady clock); called by whoever runs it, before running it.
  void mark_started();
  // The same with the time already read (steady-clock ns), so that the caller's monitoring needs no clock read.
  void mark_started(int64_t now_ns);
  // When the operation ran: steady-clock ns of mark_started() and finish(); {0, 0} when not (yet) known (polled GPU
  // operations, or an operation not finished yet).
  OpTiming timing() const;

 private:
  // Asks the poller, if any, and finishes when it reports completion; true once done.
  bool poll_once() const;

  mutable std::unique_ptr<WorkPoller> poller_;  // null: the worker calls finish(); used under mutex_
  const bool polled_ = false;                   // poller_ was given (fixed at construction, read without the lock)
  const std::shared_ptr<WorkRunner> runner_;    // null: wait for finish() (or poll)
  const uint64_t seq_ = 0;                      // the operation's sequence number in runner_'s queue
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  mutable std::atomic<bool> done_{false};
  mutable Status status_;               // written once, before done_ is released (under mutex_ by a poll)
  std::atomic<int64_t> started_ns_{0};  // steady clock when the runner started it (0: not recorded)
  int64_t finished_ns_ = 0;             // steady clock at finish() (0: polled or running); before done_ is released
  mutable std::atomic<int> sleepers_{0};  // threads in wait_for_finish's cv_ wait (finish() locks only for them)
};

}  // namespace zw::internal
