// The callers' side of receiving in the tcp engine (see tcp_engine.h): a caller in wait_for_activity() reads the
// sockets itself, spinning and then blocking in poll() on them, so that an arrival reaches it without a hand-off
// through the progress thread. Non-goals: reading while nobody waits (the progress thread does), deciding what a
// frame means (PeerState does).
//
// While callers read, the progress thread's epoll leaves the sockets' input alone (EPOLLIN off), so that arrivals
// do not wake it as well. Turning that on and off costs an epoll_ctl per connection, so it is done lazily: the
// input stays with the callers between their waits, and the progress thread takes it back once no caller waited
// for kResumeReadsNs (or at once when a wait ends inside a frame: a large transfer keeps flowing meanwhile).
#include <poll.h>

#include <ctime>

#include "common/clock.h"
#include "transport/tcp/tcp_engine.h"

namespace zw::transport::tcp {
namespace {

// Callers take the sockets' input from the progress thread only for at most this many connections: each costs a
// pollfd and two epoll_ctl calls per hand-over.
constexpr size_t kMaxQuietConns = 4;
// The progress thread reads again once no caller waited for this long.
constexpr uint64_t kResumeReadsNs = 1'000'000;

}  // namespace

Engine::ReadersLock::ReadersLock(Engine& engine) : engine_(engine) {
  engine_.readers_wanted_.fetch_add(1);
  engine_.activity_.kick();
  engine_.readers_mu_.lock();
}

Engine::ReadersLock::~ReadersLock() {
  engine_.readers_mu_.unlock();
  engine_.readers_wanted_.fetch_sub(1);
}

// Only one caller at a time reads; others (and callers while readers_ changes) just wait to be woken. With many
// connections, or while a large frame arrives, the progress thread keeps reading beside the spinning caller, who
// then sleeps on the activity's condition variable instead of blocking on the sockets.
void Engine::wait_for_activity(std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> readers(readers_mu_, std::defer_lock);
  if (readers_wanted_.load() == 0) (void)readers.try_lock();
  if (!readers.owns_lock()) return activity_.wait(timeout);
  size_t conns = 0;
  for (const auto& p : readers_) conns += static_cast<size_t>(p->nconns());
  const bool quiet = conns <= kMaxQuietConns && !any_streaming();
  if (quiet) {
    set_read_interest(false);
    if (!reads_quiet_.exchange(true)) wake();  // it now checks every kQuietCheckMs whether to take the input back
  } else if (reads_quiet_.load()) {
    set_read_interest(true);
    reads_quiet_.store(false);
  }
  bool mid_frame = false;
  auto after = [&] {
    if (quiet && mid_frame) {
      set_read_interest(true);
      reads_quiet_.store(false);
    }
    reader_left_ns_.store(now_ns());
    readers.unlock();
  };
  auto block = [&](uint64_t deadline_ns) { return block_on_sockets(deadline_ns, &mid_frame); };
  activity_.wait(
      timeout, [&] { read_inline(&mid_frame); }, after,
      quiet ? std::function<bool(uint64_t)>(block) : std::function<bool(uint64_t)>());
}

// Under readers_mu_.
bool Engine::any_streaming() const {
  for (const auto& p : readers_)
    if (p->streaming()) return true;
  return false;
}

// Under readers_mu_: turns EPOLLIN of every connection of the readers off or back on (no system call for a
// connection already in that state).
void Engine::set_read_interest(bool on) {
  for (const auto& p : readers_)
    for (int i = 0; i < p->nconns(); ++i) p->with_conn(i, [&](Conn* c) { modify_interest(c, on, std::nullopt); });
}

// Under readers_mu_.
void Engine::read_inline(bool* mid_frame) {
  *mid_frame = false;
  bool failed = false;
  for (const auto& p : readers_) {
    if (p->failed() || !p->read_inline(mid_frame)) continue;
    p->rx_failed_.store(true);
    failed = true;
  }
  if (!failed) return;
  {
    std::lock_guard<std::mutex> post(post_mu_);
    for (const auto& p : readers_)
      if (p->rx_failed_.load()) mark_dirty(*p);
  }
  wake();
}

// Under readers_mu_. A socket closed by the progress thread meanwhile is still watched by poll() (it holds the
// file); that is harmless, since the progress thread signals whatever it does through the activity.
bool Engine::block_on_sockets(uint64_t deadline_ns, bool* mid_frame) {
  if (readers_wanted_.load() > 0) return false;
  if (*mid_frame && any_streaming()) return false;
  pollfds_.clear();
  for (const auto& p : readers_)
    if (!p->failed()) p->add_poll_fds(&pollfds_);
  pollfds_.push_back(pollfd{activity_.wake_fd(), POLLIN, 0});
  const uint64_t now = now_ns();
  if (now >= deadline_ns) return true;
  const uint64_t left = deadline_ns - now;
  timespec ts{static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
  const int n = ::ppoll(pollfds_.data(), pollfds_.size(), &ts, nullptr);
  if (n <= 0) return true;
  if (pollfds_.back().revents != 0) activity_.drain_wake_fd();
  read_inline(mid_frame);
  return true;
}

// Progress thread.
void Engine::resume_reads_if_idle() {
  if (now_ns() - reader_left_ns_.load() < kResumeReadsNs) return;
  std::unique_lock<std::mutex> readers(readers_mu_, std::try_to_lock);
  if (!readers.owns_lock()) return;  // a caller is reading right now
  set_read_interest(true);
  reads_quiet_.store(false);
}

}  // namespace zw::transport::tcp
