// LivenessMonitor: the side TCP connections that tell a dead verbs peer from a slow one.
#include "transport/verbs/verbs_liveness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/thread.h"

namespace zw::transport::verbs {
namespace {

constexpr char kGoodbye = static_cast<char>(kLivenessGoodbye);
constexpr int kKeepIdleS = 2;              // TCP keep-alive: first probe after this idle time
constexpr int kKeepIntervalS = 1;          // between probes
constexpr int kKeepProbes = 3;             // unanswered probes before the connection is reset
constexpr unsigned kUserTimeoutMs = 5000;  // unacknowledged data (the goodbye) fails after this

void tune(int fd) {
  int one = 1, idle = kKeepIdleS, interval = kKeepIntervalS, probes = kKeepProbes;
  unsigned user_timeout = kUserTimeoutMs;
  // Best effort: without them a vanished host is only noticed at ZW_TIMEOUT; a killed process still is at once.
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

LivenessMonitor::LivenessMonitor(int rank, int world_size, Callback callback)
    : rank_(rank), world_size_(world_size), callback_(std::move(callback)) {}

Result<std::unique_ptr<LivenessMonitor>> LivenessMonitor::start(int rank, int world_size,
                                                                const std::string& store_address, Callback callback) {
  std::unique_ptr<LivenessMonitor> m(new LivenessMonitor(rank, world_size, std::move(callback)));
  net::HostPort where{"127.0.0.1", 0};
  if (!store_address.empty()) {
    ZW_ASSIGN_OR_RETURN(net::HostPort store, net::parse_host_port(store_address));
    ZW_ASSIGN_OR_RETURN(where.host, net::local_address_towards(store));
  }
  uint16_t port = 0;
  auto fd = net::listen_tcp(where, world_size + 4, &port);
  if (!fd.ok())
    return fd.status()
        .with_context("rank " + std::to_string(rank) + ": verbs liveness listener")
        .at(__FILE__, __LINE__);
  m->listen_fd_ = std::move(fd).value();
  ZW_TRY(net::set_nonblocking(m->listen_fd_.get()));
  m->address_ = net::HostPort{where.host, port}.to_string();
  m->wake_fd_ = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!m->wake_fd_.valid()) return system_error("eventfd of the verbs liveness monitor", errno);
  ZW_ASSIGN_OR_RETURN(m->thread_, start_thread("the verbs liveness thread", [p = m.get()] { p->run(); }));
  return m;
}

// A peer that left in order must read "goodbye, then end of stream". Two things could turn that into "reset without a
// goodbye" (the peer is then reported dead): a connection this rank's thread had not accepted, or whose hello it had not
// read, when the rank left (a rank that leaves right after connecting) — it got no goodbye, and closing a socket with
// unread input (or a listener with a backlog) sends a reset, which makes the peer's kernel drop the unread goodbye as
// well. So: accept what is waiting, read what is unread, say goodbye on every connection (the connecting side expects
// nothing else on it), and shut the sending side down so the close is a FIN. (Found by the softroce VM's liveness test
// failing 18 times in 200; docs/RELIABILITY.md.)
LivenessMonitor::~LivenessMonitor() {
  stop_.store(true, std::memory_order_release);
  wake();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (listen_fd_.valid()) accept_new();
  char buf[64];
  for (auto* list : {&sockets_, &pending_})
    for (auto& s : *list) {
      ssize_t n;
      while ((n = ::recv(s->fd.get(), buf, sizeof buf, MSG_DONTWAIT)) > 0 || (n < 0 && errno == EINTR)) {
      }
      (void)::send(s->fd.get(), &kGoodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)::shutdown(s->fd.get(), SHUT_WR);
    }
}

Status LivenessMonitor::connect(int peer, const std::string& peer_address, Deadline deadline) {
  if (peer < rank_) return Status();  // the lower rank connects; this one is accepted by run()
  std::string who = "rank " + std::to_string(peer) + "'s liveness listener at " + peer_address;
  auto where = net::parse_host_port(peer_address);
  if (!where.ok()) return where.status().with_context(who).at(__FILE__, __LINE__);
  auto fd = net::connect_tcp(*where, deadline);
  if (!fd.ok())
    return fd.status()
        .with_context("rank " + std::to_string(rank_) + " cannot reach " + who +
                      " (is that process alive? is the port blocked by a firewall?)")
        .at(__FILE__, __LINE__);
  tune(fd->get());
  const auto hello = encode_liveness_hello(rank_);
  ZW_TRY(net::send_all(fd->get(), hello.data(), hello.size(), deadline, who));
  auto s = std::make_unique<Socket>(rank_, world_size_);
  s->reader.connected_to(peer);
  s->fd = std::move(fd).value();
  s->peer = peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(s));
  }
  wake();
  return Status();
}

void LivenessMonitor::wake() {
  uint64_t one = 1;
  if (wake_fd_.valid() && ::write(wake_fd_.get(), &one, sizeof one) < 0 && errno != EAGAIN)
    ZW_WARN(kVerbs, "cannot wake the verbs liveness monitor: %s", std::strerror(errno));
}

void LivenessMonitor::accept_new() {
  for (;;) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        ZW_WARN(kVerbs, "rank %d: accept on the verbs liveness listener: %s", rank_, std::strerror(errno));
      return;
    }
    tune(fd);
    auto s = std::make_unique<Socket>(rank_, world_size_);
    s->fd = net::Fd(fd);
    sockets_.push_back(std::move(s));
  }
}

bool LivenessMonitor::service(Socket& s, short revents) {
  char buf[64];
  for (;;) {
    ssize_t n = ::recv(s.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      const auto state = s.reader.feed(std::span(reinterpret_cast<const uint8_t*>(buf), static_cast<size_t>(n)));
      if (state == LivenessReader::State::kBad) {
        ZW_WARN(kVerbs, "rank %d: dropping a liveness connection with a bad hello (rank %u): a stray client?", rank_,
                s.reader.claimed());
        return false;
      }
      s.peer = s.reader.peer();
      s.goodbye = s.reader.goodbye();
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !(revents & (POLLHUP | POLLERR))) return true;
    if (n < 0 && errno == EINTR) continue;
    std::string how = n == 0 ? "closed" : std::string("failed (") + std::strerror(errno) + ")";
    if (s.peer >= 0) {
      bool died = !s.goodbye;
      std::string why = "its liveness connection to rank " + std::to_string(rank_) + " " + how +
                        (died ? " without a goodbye: the process was killed, crashed or its host is unreachable"
                              : " after a goodbye: it shut its verbs transport down");
      callback_(s.peer, died, why);
    }
    return false;
  }
}

void LivenessMonitor::run() {
  log::set_thread_rank(rank_);
  std::vector<pollfd> fds;
  while (!stop_.load(std::memory_order_acquire)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& s : pending_) sockets_.push_back(std::move(s));
      pending_.clear();
    }
    fds.assign({{wake_fd_.get(), POLLIN, 0}, {listen_fd_.get(), POLLIN, 0}});
    for (auto& s : sockets_) fds.push_back({s->fd.get(), POLLIN | POLLRDHUP, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      ZW_WARN(kVerbs,
              "rank %d: poll in the verbs liveness monitor: %s; peer deaths are now only noticed at "
              "ZW_TIMEOUT",
              rank_, std::strerror(errno));
      return;
    }
    if (fds[0].revents) {
      uint64_t drained;
      (void)!::read(wake_fd_.get(), &drained, sizeof drained);
    }
    // Sockets first (their indexes match fds), then new connections, which the next round polls.
    std::vector<std::unique_ptr<Socket>> keep;
    for (size_t i = 0; i < sockets_.size(); ++i) {
      if (fds[i + 2].revents == 0 || service(*sockets_[i], fds[i + 2].revents)) keep.push_back(std::move(sockets_[i]));
    }
    sockets_ = std::move(keep);
    if (fds[1].revents) accept_new();
  }
}

}  // namespace zw::transport::verbs
