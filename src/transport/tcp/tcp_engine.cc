// The tcp transport's engine and progress thread (see tcp_engine.h). Handshake handling lives in
// tcp_handshake.cc, posting (inline sends) in tcp_post.cc, callers' reads in tcp_reading.cc.
#include "transport/tcp/tcp_engine.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "common/thread.h"
#include "transport/tcp/tcp_address.h"

namespace zw::transport::tcp {
namespace {

constexpr uint64_t kSpinNs = 50'000;     // busy-poll this long after the last activity before sleeping, on hosts
                                         // with at least kMinCoresToSpin hardware threads; see run()
constexpr int kSleepMs = 1000;           // epoll_wait timeout while sleeping (wake-ups come through the eventfd)
constexpr int kQuietCheckMs = 1;         // epoll_wait timeout while callers have the sockets' input (see run())
constexpr int kMaxEvents = 64;

}  // namespace

Engine::Engine(EngineConfig config, std::shared_ptr<RegionTable> regions)
    : cfg_(std::move(config)),
      regions_(std::move(regions)),
      claimed_(static_cast<size_t>(cfg_.world_size), false),
      peers_(static_cast<size_t>(cfg_.world_size)),
      dead_(static_cast<size_t>(cfg_.world_size)) {
  // A spinning wait yields between polls where cores are few (a shared 2-core host: the peer rank it waits for, or
  // another job, needs the CPU; a pause-spin measured 0.7-0.8x the busbw at 4K-256K, 2 ranks, under load) or
  // fewer than the ranks of this host. Otherwise it busy-polls its sockets, as an MPI progress loop does.
  const unsigned cores = std::thread::hardware_concurrency();
  const int local_ranks = cfg_.local_ranks > 0 ? cfg_.local_ranks : cfg_.world_size;
  activity_.configure(cores < kMinCoresToSpin || static_cast<unsigned>(local_ranks) > cores,
                     std::chrono::microseconds(cfg_.spin_us));
}

Engine::~Engine() { shutdown(); }

Result<std::string> Engine::listen(const net::HostPort& where) {
  uint16_t port = 0;
  ZW_ASSIGN_OR_RETURN(net::Fd listener, net::listen_tcp(where, 1024, &port));
  ZW_TRY(net::set_nonblocking(listener.get()));
  // Accepted sockets inherit the listener's buffer sizes (and the window scale they imply).
  if (cfg_.sockbuf > 0) ZW_TRY(net::set_buffer_sizes(listener.get(), static_cast<int>(cfg_.sockbuf)));
  net::Fd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return system_error("epoll_create1", errno);
  net::Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return system_error("eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &wake_fd_;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) return system_error("epoll_ctl(eventfd)", errno);
  ev.data.ptr = &listener_;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, listener.get(), &ev) != 0)
    return system_error("epoll_ctl(listener)", errno);
  epoll_ = std::move(epoll);
  wake_fd_ = std::move(wake);
  listener_ = std::move(listener);
  ZW_ASSIGN_OR_RETURN(thread_, start_thread("the tcp transport's thread", [this] { run(); }));
  std::string address = advertised_address({where.host, port}, cfg_.store_address);
  ZW_INFO(kTcp, "listening on %s (%d connections per peer, socket buffers %lld bytes)", address.c_str(),
          cfg_.conns_per_peer, static_cast<long long>(cfg_.sockbuf));
  return address;
}

void Engine::shutdown() {
  if (thread_.joinable()) {
    stop_.store(true);
    uint64_t one = 1;
    if (::write(wake_fd_.get(), &one, sizeof one) < 0)
      ZW_WARN(kTcp, "cannot wake the progress thread: %s", std::strerror(errno));
    thread_.join();
  }
  activity_.stop();
  std::vector<Command> commands;
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    shut_down_ = true;
    commands.swap(commands_);
    dirty_.clear();
  }
  for (auto& p : peers_)
    if (p) commands.push_back(Command{std::move(p), {}, true});
  for (Command& c : commands) {
    if (c.add)
      c.peer->set_error(Status(Code::kAborted, "the tcp transport of rank " + std::to_string(cfg_.rank) +
                                                   " was destroyed while its endpoint to rank " +
                                                   std::to_string(c.peer->rank()) + " was still in use"));
    close_peer(*c.peer);
  }
  {
    ReadersLock lock(*this);
    readers_.clear();
  }
  unattached_.clear();
  graveyard_.clear();
  listener_.reset();
}

Status Engine::add_peer(std::shared_ptr<PeerState> peer, std::vector<net::Fd> outgoing) {
  std::shared_ptr<PeerState> reader = peer;
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    if (claimed_[static_cast<size_t>(peer->rank())])
      return Status(Code::kInvalidArgument, "rank " + std::to_string(cfg_.rank) +
                                                " already has a tcp endpoint to rank " + std::to_string(peer->rank()) +
                                                "; destroy it before connecting again");
    claimed_[static_cast<size_t>(peer->rank())] = true;
    commands_.push_back(Command{std::move(peer), std::move(outgoing), true});
    posts_pending_.store(true);
  }
  {
    ReadersLock lock(*this);
    readers_.push_back(std::move(reader));
  }
  wake();
  return Status();
}

bool Engine::remove_peer(std::shared_ptr<PeerState> peer) {
  {
    ReadersLock lock(*this);
    std::erase(readers_, peer);
  }
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    claimed_[static_cast<size_t>(peer->rank())] = false;
    if (shut_down_) return false;
    commands_.push_back(Command{std::move(peer), {}, false});
    posts_pending_.store(true);
  }
  wake();
  return true;
}

bool Engine::peer_known_dead(int rank, std::string* why) {
  if (rank < 0 || rank >= cfg_.world_size) return false;
  std::lock_guard<std::mutex> lock(dead_mu_);
  const std::string& reason = dead_[static_cast<size_t>(rank)];
  if (reason.empty()) return false;
  if (why) *why = reason;
  return true;
}

// Wakes the progress thread if it is (about to be) asleep. Pairs with the sleeping_/posts_pending_ check in
// run(): both sides store, then load the other's flag (seq_cst), so at least one of them sees the other.
void Engine::wake() {
  if (sleeping_.exchange(false)) {
    uint64_t one = 1;
    if (::write(wake_fd_.get(), &one, sizeof one) < 0 && errno != EAGAIN)
      ZW_WARN(kTcp, "cannot wake the progress thread: %s", std::strerror(errno));
  }
}

void Engine::run() {
  log::set_thread_rank(cfg_.rank);
  epoll_event events[kMaxEvents];
  // Busy-polling only pays when the progress thread has a core to itself. Where cores are few (2 shared cores:
  // two ranks' callers and progress threads all spinning), it takes the CPU from the very threads it serves:
  // sleeping in epoll_wait at once measured 14-19 us instead of 31-43 us per 8-byte write (notes of issue 3).
  const uint64_t spin_ns = std::thread::hardware_concurrency() >= kMinCoresToSpin ? kSpinNs : 0;
  uint64_t last_activity = now_ns();
  while (!stop_.load()) {
    bool busy = drain();
    // While callers read the sockets' input themselves, look every kQuietCheckMs whether they stopped.
    const bool quiet = reads_quiet_.load(std::memory_order_relaxed);
    if (quiet) resume_reads_if_idle();
    int timeout = 0;
    if (!busy && now_ns() - last_activity >= spin_ns) {
      sleeping_.store(true);
      if (posts_pending_.load() || stop_.load()) {
        sleeping_.store(false);
        continue;
      }
      timeout = quiet ? kQuietCheckMs : kSleepMs;
    }
    int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout);
    sleeping_.store(false);
    if (n < 0) {
      if (errno != EINTR) ZW_WARN(kTcp, "epoll_wait failed: %s", std::strerror(errno));
      continue;
    }
    for (int i = 0; i < n; ++i) dispatch(events[i].data.ptr, events[i].events);
    graveyard_.clear();
    if (n > 0 || busy) last_activity = now_ns();
  }
}

// Takes posted requests and commands from the endpoint threads; returns whether there were any.
bool Engine::drain() {
  if (!posts_pending_.load(std::memory_order_acquire)) return false;
  // Swapping with members keeps both vectors' capacity: no allocation per drain.
  std::vector<PeerState*>& dirty = dirty_taken_;
  std::vector<Command>& commands = commands_taken_;
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    posts_pending_.store(false);
    dirty.swap(dirty_);
    commands.swap(commands_);
    pool_.give_back(released_requests_, released_records_);
    for (PeerState* p : dirty) {
      p->in_flight_.splice(p->posted_records_);
      p->dirty_ = false;
    }
  }
  for (PeerState* p : dirty) {
    if (p->failed()) {
      p->release_all();
      continue;
    }
    p->complete_done();  // writes sent whole inline behind writes then in flight
    if (p->rx_failed_.exchange(false))
      for (int i = 0; i < p->nconns() && !p->failed(); ++i) read_conn(*p, i);  // meets the caller's read error
    if (p->failed()) continue;
    for (int i = 0; i < p->nconns() && !p->failed(); ++i) flush(*p, i);
  }
  for (Command& c : commands) handle_command(c);
  dirty.clear();
  commands.clear();
  return true;
}

void Engine::handle_command(Command& command) {
  PeerState& p = *command.peer;
  auto& slot = peers_[static_cast<size_t>(p.rank())];
  if (!command.add) {
    close_peer(p);
    if (slot == command.peer) slot.reset();
    return;
  }
  slot = command.peer;
  for (size_t i = 0; i < command.outgoing.size(); ++i) {
    auto c =
        std::make_unique<Conn>(std::move(command.outgoing[i]), Conn::State::kConnecting, p.rank(), static_cast<int>(i));
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.ptr = c.get();
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->fd(), &ev) != 0) {
      fail_peer(p, system_error("epoll_ctl(add connection to rank " + std::to_string(p.rank()) + ")", errno));
      return;
    }
    c->want_out = true;
    p.conn(static_cast<int>(i)) = std::move(c);
  }
  // Connections this peer opened before this rank called connect() were parked; attach them now.
  for (size_t i = 0; i < unattached_.size();) {
    Conn* c = unattached_[i].get();
    if (c->state == Conn::State::kParked && c->peer_rank == p.rank())
      attach(p, take_unattached(c));
    else
      ++i;
  }
}

void Engine::dispatch(void* tag, uint32_t events) {
  if (tag == &wake_fd_) {
    uint64_t value = 0;
    while (::read(wake_fd_.get(), &value, sizeof value) < 0 && errno == EINTR) {
    }
    return;
  }
  if (tag == &listener_) {
    accept_all();
    return;
  }
  auto* c = static_cast<Conn*>(tag);
  if (c->closed) return;
  switch (c->state) {
    case Conn::State::kConnecting:
      return on_connected(c);
    case Conn::State::kAwaitAck:
      return on_ack(c);
    case Conn::State::kAwaitHello:
      return on_hello(c);
    case Conn::State::kParked:
      return on_parked(c);
    case Conn::State::kUp:
      return on_data(c, events);
  }
}

void Engine::on_data(Conn* c, uint32_t events) {
  PeerState& p = *peers_[static_cast<size_t>(c->peer_rank)];
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
    if (!read_conn(p, c->index)) return;
  }
  if (events & EPOLLOUT) flush(p, c->index);
}

// False when the connection (or the whole peer) was closed.
bool Engine::read_conn(PeerState& p, int index) {
  Conn* c = p.conn(index).get();
  if (c == nullptr || c->state != Conn::State::kUp) return false;
  bool between = false;
  Status st = p.read_locked(index, &between);
  if (st.ok()) return true;
  if (between)
    end_connection(p, c, st);
  else
    fail_peer(p, st);
  return false;
}

// A connection that ended cleanly is closed alone: the peer's other connections may still hold the stripes
// it sent before closing. The endpoint fails once every connection ended.
void Engine::end_connection(PeerState& peer, Conn* c, const Status& status) {
  peer.goodbye_seen_ = peer.goodbye_seen_ || c->goodbye;
  peer.lane_down(c->index, false);
  retire(std::move(peer.conn(c->index)));
  if (++peer.conns_ended_ < peer.nconns()) return;
  fail_peer(peer, peer.goodbye_seen_ ? goodbye_status() : status, peer.goodbye_seen_);
}

void Engine::flush(PeerState& peer, int index) {
  Conn* c = peer.conn(index).get();
  if (c == nullptr || c->state != Conn::State::kUp) return;  // sent once the connection is up
  SendLane& lane = peer.lane(index);
  Status st;
  bool more = false;
  {
    std::lock_guard<std::mutex> lock(lane.mu);
    st = c->flush(lane.queue, peer);
    more = !lane.queue.empty();
  }
  if (!st.ok()) return fail_peer(peer, st);
  set_interest(c, more);
}

void Engine::set_interest(Conn* c, bool out) { modify_interest(c, std::nullopt, out); }

// The progress thread sets EPOLLOUT, a spinning caller EPOLLIN; interest_mu_ keeps the two consistent.
void Engine::modify_interest(Conn* c, std::optional<bool> in, std::optional<bool> out) {
  std::lock_guard<std::mutex> lock(interest_mu_);
  const bool want_in = in.value_or(!c->read_off);
  const bool want_out = out.value_or(c->want_out);
  if (want_in == !c->read_off && want_out == c->want_out) return;
  epoll_event ev{};
  ev.events = (want_in ? EPOLLIN : 0u) | (want_out ? EPOLLOUT : 0u);
  ev.data.ptr = c;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c->fd(), &ev) != 0)
    ZW_WARN(kTcp, "epoll_ctl(mod) for a connection to rank %d failed: %s", c->peer_rank, std::strerror(errno));
  c->read_off = !want_in;
  c->want_out = want_out;
}

void Engine::fail_peer(PeerState& peer, const Status& status, bool clean) {
  Status error = status;
  if (status.code() == Code::kConnectionLost) {
    error = Status(Code::kConnectionLost, "connection to rank " + std::to_string(peer.rank()) + " (" + peer.address() +
                                              ") lost: " + status.message());
  }
  if (!peer.failed() && clean) ZW_INFO(kTcp, "%s", error.message().c_str());
  if (!peer.failed() && !clean) ZW_WARN(kTcp, "%s", error.message().c_str());
  if (error.code() == Code::kConnectionLost && !clean) {
    std::lock_guard<std::mutex> lock(dead_mu_);
    dead_[static_cast<size_t>(peer.rank())] = error.message();
  }
  peer.set_error(error);
  for (int i = 0; i < peer.nconns(); ++i) {
    if (!peer.conn(i)) continue;
    peer.lane_down(i, false);
    retire(std::move(peer.conn(i)));
  }
  peer.release_all();
}

void Engine::close_peer(PeerState& peer) {
  for (int i = 0; i < peer.nconns(); ++i) {
    if (!peer.conn(i)) continue;
    peer.lane_down(i, peer.conn(i)->state == Conn::State::kUp);
    retire(std::move(peer.conn(i)));
  }
  peer.release_all();
  peer.mark_released();
}

void Engine::retire(std::unique_ptr<Conn> c) {
  if (c->fd() >= 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->fd(), nullptr);
  c->close();
  c->closed = true;
  graveyard_.push_back(std::move(c));
}

std::unique_ptr<Conn> Engine::take_unattached(Conn* c) {
  for (size_t i = 0; i < unattached_.size(); ++i) {
    if (unattached_[i].get() != c) continue;
    std::unique_ptr<Conn> out = std::move(unattached_[i]);
    unattached_[i] = std::move(unattached_.back());
    unattached_.pop_back();
    return out;
  }
  return nullptr;
}

}  // namespace zw::transport::tcp
