// zero/optim/thread_pool.h — a small fixed pool of worker threads for data-parallel loops over tiles.
//
// Purpose: the CPU optimizer runs every step over the same tiles; threads are created once in create() and reused,
// and parallel_for allocates nothing (the job is a function pointer plus a context pointer). The calling thread
// takes part in the work, so a pool of size N has N − 1 workers. Tasks are handed out through one atomic counter.
// Threading: parallel_for may be called from one thread at a time (it is not reentrant); create/destroy from the
// owning thread. Non-goals: futures, task queues, work stealing, thread pinning.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "zerowire/status.h"

namespace zw::zero {

class ThreadPool {
 public:
  using TaskFn = void (*)(void* ctx, size_t task);

  // num_threads >= 1 counts the caller; 0 means std::thread::hardware_concurrency().
  static Result<std::unique_ptr<ThreadPool>> create(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(ctx, t) for every t in [0, num_tasks) across the pool and returns when all have finished.
  void parallel_for(size_t num_tasks, TaskFn fn, void* ctx);

 private:
  ThreadPool() = default;
  void worker_loop();
  void run_tasks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;  // workers wait here for a new generation
  std::condition_variable done_cv_;   // the caller waits here for busy_ == 0
  uint64_t generation_ = 0;           // guarded by mu_; bumped per parallel_for
  int busy_ = 0;                      // guarded by mu_; workers still inside the current job
  bool stop_ = false;                 // guarded by mu_
  TaskFn fn_ = nullptr;               // current job, published under mu_
  void* ctx_ = nullptr;
  size_t num_tasks_ = 0;
  std::atomic<size_t> next_task_{0};
};

}  // namespace zw::zero
