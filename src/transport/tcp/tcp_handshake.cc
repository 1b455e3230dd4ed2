// The engine's connection setup: accepting, the Hello exchange, parking connections that arrive before this
// rank has an endpoint for their peer, and attaching them to it. Runs on the progress thread.
//
// The higher rank of a pair connects (conns_per_peer sockets) and sends Hello{magic, version, index, count,
// rank, job hash}; the lower rank checks it, and once it has an endpoint for that rank answers with its own
// Hello. A connection is up for the connecting side when the answer arrived, for the accepting side when
// it sent it. Non-goals: authentication beyond the job id hash (the store's auth token covers the addresses).
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "transport/tcp/tcp_address.h"
#include "transport/tcp/tcp_engine.h"

namespace zw::transport::tcp {

Hello Engine::make_hello(int index) const {
  Hello h{};
  h.magic = kHelloMagic;
  h.version = kWireVersion;
  h.conn_index = static_cast<uint16_t>(index);
  h.conn_count = static_cast<uint16_t>(cfg_.conns_per_peer);
  h.rank = cfg_.rank;
  h.job_hash = cfg_.job_hash;
  return h;
}

// Why `hello` cannot belong to a peer of this job, or "" when it can (the rank is checked by the caller).
std::string Engine::check_hello(const Hello& hello) const {
  return hello_problem(hello, cfg_.job_hash, cfg_.conns_per_peer);
}

void Engine::accept_all() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) ZW_WARN(kTcp, "accept failed: %s", std::strerror(errno));
      return;
    }
    net::Fd owned(fd);
    std::string remote = sockaddr_string(reinterpret_cast<sockaddr*>(&ss));
    Status st = configure_socket(fd, cfg_.sockbuf);
    if (!st.ok()) {
      ZW_WARN(kTcp, "dropped connection from %s: %s", remote.c_str(), st.message().c_str());
      continue;
    }
    auto c = std::make_unique<Conn>(std::move(owned), Conn::State::kAwaitHello, -1, -1);
    c->remote = std::move(remote);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = c.get();
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      ZW_WARN(kTcp, "dropped connection from %s: epoll_ctl: %s", c->remote.c_str(), std::strerror(errno));
      continue;
    }
    ZW_TRACE(kTcp, "accepted connection from %s", c->remote.c_str());
    unattached_.push_back(std::move(c));
  }
}

void Engine::on_connected(Conn* c) {
  PeerState& p = *peers_[static_cast<size_t>(c->peer_rank)];
  int err = connect_error(c->fd());
  if (err != 0) {
    return fail_peer(
        p, Status(Code::kConnectionFailed, "cannot connect to rank " + std::to_string(p.rank()) + " at " + p.address() +
                                               ": " + std::strerror(err) + " (is rank " + std::to_string(p.rank()) +
                                               " running, and is that address reachable from this host?)"));
  }
  Status st = c->send_hello(make_hello(c->index));
  if (!st.ok()) return fail_peer(p, st);
  c->state = Conn::State::kAwaitAck;
  set_interest(c, false);
}

void Engine::on_ack(Conn* c) {
  PeerState& p = *peers_[static_cast<size_t>(c->peer_rank)];
  Hello h{};
  Result<bool> done = c->read_hello(&h);
  if (!done.ok()) {
    return fail_peer(p, Status(Code::kConnectionFailed,
                               "rank " + std::to_string(p.rank()) + " at " + p.address() +
                                   " closed the connection during the handshake: it rejected this rank's hello "
                                   "(different job id or ZW_TCP_CONNS_PER_PEER; see its log) or its process exited"));
  }
  if (!*done) return;
  std::string why = check_hello(h);
  if (why.empty() && (h.rank != p.rank() || h.conn_index != c->index))
    why = "answer from rank " + std::to_string(h.rank) + " for connection " + std::to_string(h.conn_index);
  if (!why.empty()) {
    return fail_peer(p, Status(Code::kProtocolError, "unexpected handshake answer from rank " +
                                                         std::to_string(p.rank()) + " at " + p.address() + ": " + why));
  }
  c->state = Conn::State::kUp;
  ZW_TRACE(kTcp, "connection %d to rank %d is up", c->index, p.rank());
  p.connection_up(c->index, c);
  flush(p, c->index);
}

void Engine::on_hello(Conn* c) {
  Hello h{};
  Result<bool> done = c->read_hello(&h);
  if (!done.ok()) {
    ZW_INFO(kTcp, "connection from %s closed before its hello: %s", c->remote.c_str(), done.status().message().c_str());
    return retire(take_unattached(c));
  }
  if (!*done) return;
  std::string why = check_hello(h);
  if (why.empty() && (h.rank <= cfg_.rank || h.rank >= cfg_.world_size)) {
    why = "rank " + std::to_string(h.rank) + " may not connect to rank " + std::to_string(cfg_.rank) + " (only ranks " +
          std::to_string(cfg_.rank + 1) + ".." + std::to_string(cfg_.world_size - 1) + " connect to it)";
  }
  if (!why.empty()) {
    ZW_WARN(kTcp, "rejected tcp connection from %s: %s", c->remote.c_str(), why.c_str());
    return retire(take_unattached(c));
  }
  c->peer_rank = h.rank;
  c->index = h.conn_index;
  std::shared_ptr<PeerState>& peer = peers_[static_cast<size_t>(h.rank)];
  if (!peer) {
    c->state = Conn::State::kParked;
    ZW_TRACE(kTcp, "parked connection %d from rank %d until this rank connects to it", c->index, h.rank);
    return;
  }
  if (peer->failed()) return retire(take_unattached(c));
  attach(*peer, take_unattached(c));
}

void Engine::on_parked(Conn* c) {
  Status st = c->check_silent();
  if (st.ok()) return;
  ZW_INFO(kTcp, "dropped parked connection %d from rank %d (%s): %s", c->index, c->peer_rank, c->remote.c_str(),
          st.message().c_str());
  retire(take_unattached(c));
}

void Engine::attach(PeerState& peer, std::unique_ptr<Conn> c) {
  int index = c->index;
  if (peer.conn(index)) {
    ZW_WARN(kTcp, "rejected a second connection %d from rank %d (%s)", index, peer.rank(), c->remote.c_str());
    return retire(std::move(c));
  }
  Status st = c->send_hello(make_hello(index));
  if (!st.ok()) {
    retire(std::move(c));
    return fail_peer(peer, st);
  }
  c->state = Conn::State::kUp;
  peer.conn(index) = std::move(c);
  ZW_TRACE(kTcp, "connection %d from rank %d is up", index, peer.rank());
  peer.connection_up(index, peer.conn(index).get());
  flush(peer, index);
}

}  // namespace zw::transport::tcp
