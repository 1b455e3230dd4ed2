// The helper threads of helper_pool.h.
#include "common/helper_pool.h"

#include <unistd.h>

#include <algorithm>

#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/topology.h"

namespace zw::internal {
namespace {

constexpr int kMaxThreads = 64;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

std::atomic<int> g_local_ranks{0};  // the most ranks of one communicator seen on this host

}  // namespace

void HelperPool::note_local_ranks(int ranks) {
  int seen = g_local_ranks.load(std::memory_order_relaxed);
  while (ranks > seen && !g_local_ranks.compare_exchange_weak(seen, ranks, std::memory_order_relaxed)) {
  }
}

int HelperPool::auto_threads(int cpus, int local_ranks) {
  return std::clamp(cpus / std::max(local_ranks, 1), 1, kAutoThreads);
}

HelperPool& HelperPool::instance() {
  // Never destroyed: a helper may still be asleep in it when the process exits.
  static HelperPool* pool = [] {
    const Knobs& k = knobs();
    int64_t threads = k.host_threads;
    if (threads == 0) {
      const int cpus = usable_cpus(), ranks = std::max(g_local_ranks.load(std::memory_order_relaxed), 1);
      threads = auto_threads(cpus, ranks);
      ZW_INFO(kInit, "host copies and reductions: %lld thread(s) per rank (%d usable CPUs, %d rank(s) on this host; "
              "ZW_HOST_THREADS overrides)", static_cast<long long>(threads), cpus, ranks);
    } else if (threads < 1 || threads > kMaxThreads) {
      ZW_WARN(kInit, "ZW_HOST_THREADS=%lld is outside 0..%d (0: auto); using %d", static_cast<long long>(threads),
              kMaxThreads, threads < 1 ? 1 : kMaxThreads);
      threads = std::clamp<int64_t>(threads, 1, kMaxThreads);
    }
    const size_t split = k.host_split_bytes > 0 ? static_cast<size_t>(k.host_split_bytes) : 1;
    const uint64_t spin = static_cast<uint64_t>(std::max<int64_t>(k.shm_spin_us, 0)) * 1000;
    return new HelperPool(static_cast<int>(threads), split, spin);
  }();
  return *pool;
}

HelperPool::HelperPool(int threads, size_t split_bytes, uint64_t spin_ns)
    : threads_(std::clamp(threads, 1, kMaxThreads)),
      split_bytes_(std::max<size_t>(split_bytes, 2)),
      spin_ns_(spin_ns) {}

HelperPool::~HelperPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    parts_ = 0;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

int HelperPool::parts_for(size_t bytes, Job job) const {
  if (threads_ <= 1 || bytes < (job == Job::kVmWrite ? 2 * split_bytes_ : split_bytes_)) return 1;
  return static_cast<int>(std::clamp<size_t>(bytes / (split_bytes_ / 2), 1, static_cast<size_t>(threads_)));
}

void HelperPool::start_helpers() {
  owner_ = ::getpid();
  helpers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) {
    Result<std::thread> helper = start_thread("a helper thread", [this] { helper_loop(); });
    if (!helper.ok()) {  // the helpers are an acceleration: the caller claims the parts no helper takes
      ZW_WARN(kInit, "%s; host copies and reductions go on with %d helper(s)", helper.status().message().c_str(),
              i - 1);
      break;
    }
    helpers_.push_back(std::move(helper).value());
  }
  ZW_INFO(kInit, "started %zu helper thread(s) for host copies and reductions of at least %zu bytes", helpers_.size(),
          split_bytes_);
}

int HelperPool::claim(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation_.load(std::memory_order_relaxed) != generation || next_part_ >= parts_) return -1;
  return next_part_++;
}

void HelperPool::run_erased(int parts, Call call, void* ctx) {
  if (parts <= 1 || threads_ <= 1) {
    for (int p = 0; p < parts; ++p) call(ctx, p);
    return;
  }
  if (!busy_.try_lock()) {  // another caller's job is running: this one runs alone rather than wait
    busy_jobs_.fetch_add(1, std::memory_order_relaxed);
    for (int p = 0; p < parts; ++p) call(ctx, p);
    return;
  }
  std::call_once(started_, [this] { start_helpers(); });
  if (owner_ != ::getpid()) {  // a child forked after the helpers started has none (and mutex_ may have been held by
                               // one of them at the fork): it runs its jobs alone
    busy_.unlock();
    for (int p = 0; p < parts; ++p) call(ctx, p);
    return;
  }
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    call_ = call;
    ctx_ = ctx;
    parts_ = parts;
    next_part_ = 0;
    done_.store(0, std::memory_order_relaxed);
    generation = generation_.load(std::memory_order_relaxed) + 1;
    generation_.store(generation, std::memory_order_release);
    if (sleeping_ > 0) wake_.notify_all();
  }
  for (int p; (p = claim(generation)) >= 0;) {
    call(ctx, p);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
  while (done_.load(std::memory_order_acquire) < parts) cpu_relax();  // the helpers' parts
  shared_jobs_.fetch_add(1, std::memory_order_relaxed);
  busy_.unlock();
}

void HelperPool::helper_loop() {
  uint64_t seen = 0;  // the last job this helper looked at
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const uint64_t t0 = now_ns();
      while ((g = generation_.load(std::memory_order_acquire)) == seen && now_ns() - t0 < spin_ns_) cpu_relax();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (g == seen) {
      ++sleeping_;
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      --sleeping_;
      g = generation_.load(std::memory_order_relaxed);
    }
    if (stop_) return;
    seen = g;
    // Claims the job's parts while it is still this generation's (claim() under the lock, inlined here to read the
    // job's call and context with the part).
    while (generation_.load(std::memory_order_relaxed) == g && next_part_ < parts_) {
      const int part = next_part_++;
      const Call call = call_;
      void* ctx = ctx_;
      lock.unlock();
      call(ctx, part);
      done_.fetch_add(1, std::memory_order_acq_rel);
      lock.lock();
    }
  }
}

}  // namespace zw::internal
