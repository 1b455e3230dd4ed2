// zero/optim/thread_pool.cc — fixed worker threads woken per parallel_for through a generation counter.
//
// Non-goals: see thread_pool.h.
#include "zero/optim/thread_pool.h"

#include <algorithm>
#include <string>
#include <system_error>

namespace zw::zero {

Result<std::unique_ptr<ThreadPool>> ThreadPool::create(int num_threads) {
  if (num_threads < 0) return Status(Code::kInvalidArgument, "thread pool: num_threads must be >= 0");
  if (num_threads == 0) num_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::unique_ptr<ThreadPool> pool(new ThreadPool());
  try {
    pool->workers_.reserve(num_threads - 1);
    for (int i = 1; i < num_threads; ++i) pool->workers_.emplace_back([p = pool.get()] { p->worker_loop(); });
  } catch (const std::system_error& e) {
    return Status(Code::kSystem, std::string("thread pool: cannot start worker threads: ") + e.what());
  }
  return pool;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_tasks() {
  for (size_t t = next_task_.fetch_add(1, std::memory_order_relaxed); t < num_tasks_;
       t = next_task_.fetch_add(1, std::memory_order_relaxed)) {
    fn_(ctx_, t);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_tasks();
    std::lock_guard<std::mutex> lock(mu_);
    if (--busy_ == 0) done_cv_.notify_one();
  }
}

void ThreadPool::parallel_for(size_t num_tasks, TaskFn fn, void* ctx) {
  if (num_tasks == 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (size_t t = 0; t < num_tasks; ++t) fn(ctx, t);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = fn;
    ctx_ = ctx;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  run_tasks();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return busy_ == 0; });
}

}  // namespace zw::zero
