// Activity (how wait_for_activity callers spin, sleep and are woken) and the free lists of the tcp engine (see
// tcp_engine.h). Non-goals: reading sockets (the engine's read_inline, passed in as `poll`), fairness between
// several waiting threads (all of them are woken).
#include <algorithm>
#include <thread>

#include "common/clock.h"
#include "transport/tcp/tcp_engine.h"

namespace zw::transport::tcp {
namespace {

constexpr uint64_t kWaitSpinNs = 20'000;  // wait_for_activity polls this long before sleeping

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

void Activity::add(int64_t delta) {
  ready_.fetch_add(delta);
  if (delta > 0) notify();
}

void Activity::pulse() {
  generation_.fetch_add(1);
  notify();
}

void Activity::notify() {
  if (waiters_.load() == 0) return;
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

// Spins briefly (calling `poll`) before sleeping: a condition-variable wake-up costs several microseconds of
// round-trip latency. On hosts with few cores the spin yields between polls, so that the peer rank's threads
// (which it waits for) get the CPU: measured 1.1-1.5x the busbw of a pause-spin at 4K-256K, 2 and 4 ranks on
// 2 cores under load.
void Activity::wait(std::chrono::microseconds timeout, const std::function<void()>& poll,
                    const std::function<void()>& after_spin) {
  static const bool few_cores = std::thread::hardware_concurrency() < kMinCoresToSpin;
  const uint64_t generation = generation_.load();
  auto ready = [&] { return ready_.load() > 0 || generation_.load() != generation || stopped_.load(); };
  const uint64_t start = now_ns();
  // Clamped to an hour so that a "forever" timeout cannot overflow the clock arithmetic (wake-ups may be early).
  const uint64_t timeout_ns = static_cast<uint64_t>(std::clamp<int64_t>(timeout.count(), 0, 3'600'000'000)) * 1000;
  const uint64_t spin_ns = std::min(timeout_ns, kWaitSpinNs);
  bool got = false;
  while (!got && now_ns() - start < spin_ns) {
    if ((got = ready())) break;
    if (poll) poll();
    if ((got = ready())) break;
    if (few_cores)
      std::this_thread::yield();
    else
      cpu_relax();
  }
  if (after_spin) after_spin();
  if (got) return;
  std::unique_lock<std::mutex> lock(mu_);
  waiters_.fetch_add(1);
  cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns - std::min(timeout_ns, now_ns() - start)), ready);
  waiters_.fetch_sub(1);
}

void Activity::stop() {
  stopped_.store(true);
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

SendReq* RequestPool::request() {
  if (free_requests_.empty()) {
    request_storage_.push_back(std::make_unique<SendReq>());
    return request_storage_.back().get();
  }
  return free_requests_.pop();
}

WriteRecord* RequestPool::record() {
  if (free_records_.empty()) {
    record_storage_.push_back(std::make_unique<WriteRecord>());
    return record_storage_.back().get();
  }
  return free_records_.pop();
}

void RequestPool::give_back(Fifo<SendReq>& requests, Fifo<WriteRecord>& records) {
  free_requests_.splice(requests);
  free_records_.splice(records);
}

}  // namespace zw::transport::tcp
