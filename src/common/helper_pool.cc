// The helper threads of helper_pool.h.
#include "common/helper_pool.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"

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

// The smallest CPU quota of this process's cgroup and its ancestors, from cgroup v2's cpu.max or v1's
// cpu.cfs_quota_us and cpu.cfs_period_us (a container's `--cpus`); 0 when none is set or nothing can be read.
int cgroup_cpu_limit() {
  std::ifstream self("/proc/self/cgroup");
  int limit = 0;
  for (std::string line; std::getline(self, line);) {
    // "0::/path" (v2) or "ID:cpu,cpuacct:/path" (v1's cpu controller)
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    const bool v2 = controllers == ",,";
    if (!v2 && controllers.find(",cpu,") == std::string::npos) continue;
    for (std::string path = line.substr(b + 1); !path.empty();) {  // the cgroup, then each ancestor up to the root
      std::string text;
      if (v2) {
        std::ifstream f("/sys/fs/cgroup" + path + "/cpu.max");
        std::getline(f, text);
      } else {
        const std::string dir = "/sys/fs/cgroup/cpu" + path;
        std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
        std::string quota, period;
        if (q >> quota && p >> period) text = quota + " " + period;
      }
      if (const int cpus = HelperPool::cpus_of_quota(text); cpus > 0) limit = limit == 0 ? cpus : std::min(limit, cpus);
      const size_t slash = path.rfind('/');
      path = path == "/" || slash == std::string::npos ? "" : slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  return limit;
}

// The CPUs this process may run on: its affinity mask, lowered by a cgroup CPU quota.
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  if (const int limit = cgroup_cpu_limit(); limit > 0) cpus = std::min(cpus, limit);
  return std::max(cpus, 1);
}

}  // namespace

void HelperPool::note_local_ranks(int ranks) {
  int seen = g_local_ranks.load(std::memory_order_relaxed);
  while (ranks > seen && !g_local_ranks.compare_exchange_weak(seen, ranks, std::memory_order_relaxed)) {
  }
}

int HelperPool::cpus_of_quota(const std::string& text) {
  long long quota = 0, period = 0;
  if (std::sscanf(text.c_str(), "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0) return 0;
  return static_cast<int>(std::clamp<long long>(quota / period, 1, 1 << 20));
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
  for (int i = 1; i < threads_; ++i) helpers_.emplace_back([this] { helper_loop(); });
  ZW_INFO(kInit, "started %d helper thread(s) for host copies and reductions of at least %zu bytes", threads_ - 1,
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
