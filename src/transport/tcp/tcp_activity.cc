// Activity (how wait_for_activity callers spin, sleep and are woken) and the free lists of the tcp engine (see
// tcp_engine.h). Non-goals: reading sockets (the engine's read_inline and its blocking poll, passed in as `poll`
// and `block`), fairness between several waiting threads (all of them are woken).
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "common/clock.h"
#include "transport/tcp/tcp_engine.h"

namespace zw::transport::tcp {
namespace {

// The Activity whose wait() this thread is blocked in (block() reads the sockets and may deliver to itself).
thread_local const Activity* t_blocked_in = nullptr;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

Activity::Activity() : wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

void Activity::configure(bool yield_when_spinning, std::chrono::nanoseconds spin) {
  yield_ = yield_when_spinning;
  spin_ns_ = static_cast<uint64_t>(std::max<int64_t>(0, spin.count()));
}

void Activity::add(int64_t delta) {
  ready_.fetch_add(delta);
  if (delta > 0) notify();
}

void Activity::pulse() {
  generation_.fetch_add(1);
  notify();
}

// Pairs with wait(): the caller registers (waiters_/blocked_), then checks the state; this side changes the state,
// then checks the registrations (all seq_cst), so at least one of them sees the other.
void Activity::notify() {
  kick();
  if (waiters_.load() == 0) return;
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

// The blocked caller itself needs no wake-up: it is awake, reading (only one caller blocks at a time).
void Activity::kick() {
  if (blocked_.load() == 0 || t_blocked_in == this) return;
  uint64_t one = 1;
  while (::write(wake_fd_.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void Activity::drain_wake_fd() {
  uint64_t value = 0;
  while (::read(wake_fd_.get(), &value, sizeof value) < 0 && errno == EINTR) {
  }
}

// Spins briefly (calling `poll`) before sleeping: a wake-up costs several microseconds of round-trip latency.
// Where configure() says so (few cores, or more ranks than cores) the spin yields between polls, so that the peer
// rank's threads (which it waits for) get the CPU: measured 1.1-1.5x the busbw of a pause-spin at 4K-256K, 2 and
// 4 ranks on 2 cores under load.
void Activity::wait(std::chrono::microseconds timeout, const std::function<void()>& poll,
                    const std::function<void()>& after_spin, const std::function<bool(uint64_t)>& block) {
  const uint64_t generation = generation_.load();
  auto ready = [&] { return ready_.load() > 0 || generation_.load() != generation || stopped_.load(); };
  const uint64_t start = now_ns();
  // Clamped to an hour so that a "forever" timeout cannot overflow the clock arithmetic (wake-ups may be early).
  const uint64_t timeout_ns = static_cast<uint64_t>(std::clamp<int64_t>(timeout.count(), 0, 3'600'000'000)) * 1000;
  const uint64_t spin_ns = std::min(timeout_ns, spin_ns_);
  bool got = false;
  while (!got && now_ns() - start < spin_ns) {
    if ((got = ready())) break;
    if (poll) poll();
    if ((got = ready())) break;
    if (yield_)
      std::this_thread::yield();
    else
      cpu_relax();
  }
  bool done = got || ready() || timeout_ns == 0;
  if (!done && block && wake_fd_.valid()) {
    blocked_.fetch_add(1);
    t_blocked_in = this;
    bool blocking = true;  // false: block() asks to sleep on the condition variable for the rest of the wait
    for (uint64_t now = now_ns(); blocking && !ready() && now - start < timeout_ns; now = now_ns())
      blocking = block(start + timeout_ns);
    t_blocked_in = nullptr;
    blocked_.fetch_sub(1);
    done = blocking || ready();
  }
  if (after_spin) after_spin();
  if (done) return;
  std::unique_lock<std::mutex> lock(mu_);
  waiters_.fetch_add(1);
  cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns - std::min(timeout_ns, now_ns() - start)), ready);
  waiters_.fetch_sub(1);
}

void Activity::stop() {
  stopped_.store(true);
  notify();
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
