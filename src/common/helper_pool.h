// common/helper_pool.h — helper threads that share one large host copy or reduction of a rank (ZW_HOST_THREADS).
//
// A host collective moves a large operation's bytes on the calling rank's one core: over shm its copies into the
// peers' memory and its reductions run at what one core can stream from memory, while a host with more cores than
// ranks has bandwidth to spare. With T threads per rank, a copy or reduction of at least ZW_HOST_SPLIT_BYTES is cut
// into up to T parts: the calling thread runs parts itself, T − 1 helper threads (one set per process, started at the
// first split) run the others, and the call returns when every part is done. T is ZW_HOST_THREADS, or by default
// (0, auto) the CPUs this process may use (its affinity mask and cgroup quota) shared among the ranks of this host
// that its communicators have seen, at most kAutoThreads: 1 (off) where ranks are as many as cores or are bound to one
// core each (Open MPI's default), 4 for 2-4 unbound ranks on 16 cores (docs/PERF.md: reduce-scatter and all-reduce
// 1.3-3.6x faster from 4 MiB there).
//
// One job at a time: a caller that finds the helpers busy (another rank that is a thread of the same process, another
// communicator) runs all of its parts itself, so a job never waits for another. Helpers poll for the next job for
// ZW_SHM_SPIN_US after one ends (a pipelined operation's next chunk follows within microseconds), then sleep on a
// condition variable until a caller wakes them.
// Threading: run() from any thread; the parts run concurrently on different threads and must not throw.
// Non-goals: device memory, pinning helpers to cores (the scheduler places them), work stealing between jobs.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace zw::internal {

class HelperPool {
 public:
  // The process's pool, sized by ZW_HOST_THREADS (or auto) and ZW_HOST_SPLIT_BYTES when first asked for, which is at
  // the first large host copy of a communicator (after note_local_ranks).
  static HelperPool& instance();
  // A communicator saw `ranks` of its ranks on this host (itself included): the auto size divides the CPUs among the
  // most seen. Called at communicator creation, before the pool is first asked for.
  static void note_local_ranks(int ranks);
  // The auto size: `cpus` usable by this process shared among `local_ranks`, within 1..kAutoThreads.
  static int auto_threads(int cpus, int local_ranks);
  static constexpr int kAutoThreads = 4;
  // A pool of `threads` (the caller included) splitting jobs of at least `split_bytes`; for tests and benchmarks.
  HelperPool(int threads, size_t split_bytes, uint64_t spin_ns);
  ~HelperPool();
  HelperPool(const HelperPool&) = delete;
  HelperPool& operator=(const HelperPool&) = delete;

  int threads() const { return threads_; }
  // Where a job's bytes go. The caller waits for the last part, so a job is cut only when its parts outlast a
  // helper's wake-up: work on memory this process maps (a reduction, a copy into a mapped arena) from the split size, a
  // copy into another process with process_vm_writev (whose concurrent calls into one peer contend in its kernel) from
  // twice it; parts are at least half the split size either way. On the H200 host a 512 KiB all-gather block cut in two
  // took twice as long as whole, while the all-reduce's gather of 1 MiB slices cut in four ran 1.4-1.6x faster
  // (docs/PERF.md, "Helper threads for host copies and reductions").
  enum class Job { kMapped, kVmWrite };
  // How many parts a job of `bytes` is cut into: 1 below the size its kind asks for (above) or when off, else up to
  // threads(), each part at least half the split size.
  int parts_for(size_t bytes, Job job = Job::kMapped) const;

  // Runs fn(part) for every part in [0, parts) and returns when all have returned; parts > 1 only as parts_for gave.
  template <class F>
  void run(int parts, F&& fn) {
    auto call = [](void* ctx, int part) { (*static_cast<F*>(ctx))(part); };
    run_erased(parts, call, &fn);
  }

  // Runs fn(offset, length) over [0, bytes) cut into parts_for(bytes, job) ranges, each starting at a multiple of
  // `align` (a power of two; the last range takes the rest), and returns when all are done.
  template <class F>
  void split(size_t bytes, size_t align, Job job, F&& fn) {
    const int parts = parts_for(bytes, job);
    if (parts <= 1) {
      fn(size_t{0}, bytes);
      return;
    }
    const size_t step = (bytes / static_cast<size_t>(parts) + align - 1) & ~(align - 1);
    run(parts, [&](int part) {
      const size_t offset = static_cast<size_t>(part) * step;
      if (offset < bytes) fn(offset, std::min(step, bytes - offset));
    });
  }

  // Jobs that ran on the helpers, and jobs that found them busy and ran on their caller alone (counters for tests).
  uint64_t shared_jobs() const { return shared_jobs_.load(std::memory_order_relaxed); }
  uint64_t busy_jobs() const { return busy_jobs_.load(std::memory_order_relaxed); }

 private:
  using Call = void (*)(void*, int);
  void run_erased(int parts, Call call, void* ctx);
  // Claims the next part of job `generation` (-1: none left, or the job is another one now).
  int claim(uint64_t generation);
  void helper_loop();
  void start_helpers();

  const int threads_;
  const size_t split_bytes_;
  const uint64_t spin_ns_;
  std::mutex busy_;  // held by the caller of the running job

  // The job: written by its caller under mutex_, read under mutex_ when a part is claimed.
  std::mutex mutex_;
  std::condition_variable wake_;
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  int parts_ = 0;
  int next_part_ = 0;
  int sleeping_ = 0;
  bool stop_ = false;
  std::atomic<uint64_t> generation_{0};  // bumped when a job is posted (what spinning helpers poll)
  std::atomic<int> done_{0};             // parts of the current job finished

  std::once_flag started_;
  int owner_ = 0;  // the process that started the helpers (a forked child has none)
  std::vector<std::thread> helpers_;
  std::atomic<uint64_t> shared_jobs_{0}, busy_jobs_{0};
};

}  // namespace zw::internal
