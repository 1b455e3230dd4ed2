// The TCP store server: one thread, poll() over an eventfd (stop), the non-blocking listening socket and every
// client socket, so that one slow or malicious client never blocks the others.
//
// Each connection must send HELLO with the server's token (compared in constant time) within the HELLO
// deadline; frames before that are limited to kPreAuthMaxFrame bytes. A frame longer than the limit, a
// malformed payload or a wrong token gets an ERROR reply (best effort) and the connection is dropped with a
// WARN naming the peer — the first kWarnBurst such WARNs one by one, then at most one line per kWarnEvery that counts
// the connections dropped since and names the last, so that a flood of bad connections cannot flood the job's output. Requests go to StoreEngine; while a connection has a parked GET/WAIT or unsent reply
// bytes the server stops reading it, which bounds what a client can make the server buffer.
// Non-goals: TLS, connection limits beyond the HELLO deadline, more than one server thread.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <thread>

#include "bootstrap/bootstrap_internal.h"
#include "bootstrap/store_engine.h"
#include "bootstrap/store_util.h"
#include "common/log.h"
#include "common/socket.h"

namespace zw {
namespace {

using store::StoreEngine;

constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kReadBudget = 1 << 20;  // bytes read from one connection per wakeup, for fairness
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
constexpr int kBacklog = 1024;
constexpr int kWarnBurst = 8;                        // misbehaving clients logged one by one
constexpr auto kWarnEvery = std::chrono::seconds(10);  // then one summary line at most this often

// The WARNs about clients that misbehave (see the file comment). Owned by the server thread.
class ClientWarnings {
 public:
  explicit ClientWarnings(const std::string& address) : address_(address) {}
  ~ClientWarnings() {
    if (quiet_ > 0)
      ZW_WARN(kBoot, "store server on %s: %lld more bad client connection(s) dropped without a line each (last: %s)",
              address_.c_str(), static_cast<long long>(quiet_), last_.c_str());
  }
  void warn(const std::string& line) {
    const Clock::time_point now = Clock::now();
    if (logged_ < kWarnBurst) {
      ++logged_;
      ZW_WARN(kBoot, "%s%s", line.c_str(), logged_ == kWarnBurst ? " (further ones are counted, not each logged)" : "");
      next_summary_ = now + kWarnEvery;
      return;
    }
    ++quiet_;
    last_ = line;
    if (now < next_summary_) return;
    ZW_WARN(kBoot, "store server on %s: %lld more bad client connection(s) dropped in the last %lld s (last: %s)",
            address_.c_str(), static_cast<long long>(quiet_),
            static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(kWarnEvery).count()), line.c_str());
    quiet_ = 0;
    next_summary_ = now + kWarnEvery;
  }

 private:
  const std::string& address_;
  int logged_ = 0;                    // lines logged one by one so far
  int64_t quiet_ = 0;                 // dropped since the last line
  std::string last_;                  // the last of those
  Clock::time_point next_summary_{};  // no summary line before this
};

struct Conn {
  net::Fd fd;                        // non-blocking socket
  std::string peer;                  // "host:port", for logs
  bool authed = false;               // a HELLO with the right token arrived
  bool dead = false;                 // dropped; erased at the end of the loop iteration
  Clock::time_point hello_deadline;  // dropped when not authed by then
  std::string in;                    // received bytes
  size_t in_pos = 0;                 // in[in_pos, end) is not consumed yet
  std::string out;                   // reply bytes
  size_t out_pos = 0;                // out[out_pos, end) is not sent yet
  bool pending_out() const { return out_pos < out.size(); }
};

class Server final : public TcpStoreServer {
 public:
  Server(net::Fd listener, net::Fd wake, uint16_t port, std::string address, const TcpStoreServerOptions& options,
         const TcpStoreServerTuning& tuning)
      : listen_(std::move(listener)),
        wake_(std::move(wake)),
        port_(port),
        address_(std::move(address)),
        token_(options.auth_token),
        max_frame_(options.max_frame_bytes),
        hello_timeout_(tuning.hello_timeout) {
    thread_ = std::thread([this] { run(); });
  }
  ~Server() override {
    stop_.store(true, std::memory_order_release);
    uint64_t one = 1;
    ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
    (void)ignored;
    thread_.join();
    ZW_INFO(kBoot, "store server on %s stopped", address_.c_str());
  }
  uint16_t port() const override { return port_; }
  std::string address() const override { return address_; }

 private:
  void run();
  int poll_timeout_ms(Clock::time_point now) const;
  void build_pollfds(std::vector<pollfd>* fds, std::vector<uint64_t>* ids);
  void accept_all();
  void on_events(uint64_t id, short revents);
  bool read_some(uint64_t id, Conn& c);
  bool flush(Conn& c);
  void pump(uint64_t id);
  Status handle_hello(Conn& c, std::string_view payload);
  Status handle_request(uint64_t id, std::string_view payload);
  void deliver(std::vector<StoreEngine::Out>* out);
  void reject(uint64_t id, Conn& c, const Status& why);
  void kill(uint64_t id, Conn& c);
  void expire_hellos(Clock::time_point now);
  void sweep();

  net::Fd listen_;
  net::Fd wake_;  // eventfd written by the destructor
  const uint16_t port_;
  const std::string address_;
  const std::string token_;
  const size_t max_frame_;
  const std::chrono::milliseconds hello_timeout_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  // Owned by the server thread.
  StoreEngine engine_;
  std::map<uint64_t, Conn> conns_;
  uint64_t next_id_ = 1;
  std::vector<uint64_t> dirty_;  // connections whose buffered input may be processable now
  Clock::time_point accept_resume_{};
  ClientWarnings warnings_{address_};
};

void Server::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;  // ids[i] is the connection of fds[i + 2]
  while (!stop_.load(std::memory_order_acquire)) {
    build_pollfds(&fds, &ids);
    int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
    if (rc < 0) {
      if (errno == EINTR) continue;
      ZW_WARN(kBoot, "store server on %s: poll failed: %s", address_.c_str(), std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (fds[0].revents != 0) {
      uint64_t drained = 0;
      ssize_t ignored = ::read(wake_.get(), &drained, sizeof drained);
      (void)ignored;
    }
    if (fds[1].fd >= 0 && (fds[1].revents & POLLIN)) accept_all();
    for (size_t i = 0; i < ids.size(); ++i)
      if (fds[i + 2].revents != 0) on_events(ids[i], fds[i + 2].revents);
    Clock::time_point now = Clock::now();
    expire_hellos(now);
    std::vector<StoreEngine::Out> out;
    engine_.expire(now, &out);
    deliver(&out);
    while (!dirty_.empty()) {
      uint64_t id = dirty_.back();
      dirty_.pop_back();
      pump(id);
    }
    sweep();
  }
}

int Server::poll_timeout_ms(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  if (auto d = engine_.next_deadline()) next = *d;
  for (const auto& [id, c] : conns_)
    if (!c.authed && c.hello_deadline < next) next = c.hello_deadline;
  if (now < accept_resume_ && accept_resume_ < next) next = accept_resume_;
  if (next == Clock::time_point::max()) return -1;
  if (next <= now) return 0;
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(next - now).count();
  int64_t ms = (left + 999) / 1000;  // round up so the deadline has passed when poll returns
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

void Server::build_pollfds(std::vector<pollfd>* fds, std::vector<uint64_t>* ids) {
  fds->clear();
  ids->clear();
  fds->push_back({wake_.get(), POLLIN, 0});
  fds->push_back({Clock::now() >= accept_resume_ ? listen_.get() : -1, POLLIN, 0});
  for (const auto& [id, c] : conns_) {
    if (c.dead) continue;
    short events = POLLRDHUP;
    if (c.pending_out())
      events |= POLLOUT;
    else if (!engine_.parked(id))
      events |= POLLIN;
    fds->push_back({c.fd.get(), events, 0});
    ids->push_back(id);
  }
}

void Server::accept_all() {
  for (int i = 0; i < 64; ++i) {
    std::string peer;
    Result<net::Fd> fd = net::accept_tcp(listen_.get(), Deadline::after(std::chrono::nanoseconds(0)), &peer);
    if (!fd.ok()) {
      if (fd.status().code() == Code::kTimeout) return;
      ZW_WARN(kBoot, "store server on %s cannot accept connections: %s; retrying in %d ms", address_.c_str(),
              fd.status().message().c_str(), static_cast<int>(kAcceptPause.count()));
      accept_resume_ = Clock::now() + kAcceptPause;
      return;
    }
    Status st = net::set_nonblocking(fd->get());
    if (!st.ok()) {
      warnings_.warn("dropping store connection from " + peer + ": " + st.message());
      continue;
    }
    (void)net::set_nodelay(fd->get());  // latency only; the connection works without it
    Conn c;
    c.fd = std::move(*fd);
    c.peer = peer;
    c.hello_deadline = Clock::now() + hello_timeout_;
    ZW_TRACE(kBoot, "store connection from %s", peer.c_str());
    conns_.emplace(next_id_++, std::move(c));
  }
}

void Server::on_events(uint64_t id, short revents) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.dead) return;
  Conn& c = it->second;
  if ((revents & POLLOUT) && !flush(c)) return kill(id, c);
  if (revents & (POLLIN | POLLHUP | POLLERR | POLLRDHUP)) {
    if (engine_.parked(id) || c.pending_out()) {
      // Input was not requested, so this is a hang-up; a parked request has nobody to answer any more.
      ZW_TRACE(kBoot, "store client %s hung up", c.peer.c_str());
      return kill(id, c);
    }
    if (!read_some(id, c)) return;
  }
  dirty_.push_back(id);
}

bool Server::read_some(uint64_t id, Conn& c) {
  size_t budget = kReadBudget;
  while (budget > 0) {
    size_t old = c.in.size();
    c.in.resize(old + kReadChunk);
    ssize_t n = ::recv(c.fd.get(), c.in.data() + old, kReadChunk, MSG_DONTWAIT);
    c.in.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
    if (n > 0) {
      budget -= std::min(budget, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      if (c.authed)
        ZW_TRACE(kBoot, "store client %s disconnected", c.peer.c_str());
      else
        warnings_.warn("store connection from " + c.peer + " closed before sending hello");
      kill(id, c);
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    warnings_.warn("lost store connection from " + c.peer + ": " + std::strerror(errno));
    kill(id, c);
    return false;
  }
  return true;
}

bool Server::flush(Conn& c) {
  while (c.pending_out()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    ZW_TRACE(kBoot, "send to store client %s failed: %s", c.peer.c_str(), std::strerror(errno));
    return false;
  }
  c.out.clear();
  c.out_pos = 0;
  return true;
}

void Server::pump(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  while (!c.dead && !engine_.parked(id) && !c.pending_out()) {
    size_t avail = c.in.size() - c.in_pos;
    if (avail < store::kHeaderBytes) break;
    uint32_t len = store::read_frame_length(c.in.data() + c.in_pos);
    size_t limit = c.authed ? max_frame_ : std::min(max_frame_, store::kPreAuthMaxFrame);
    if (len > limit) {
      return reject(
          id, c,
          Status(Code::kProtocolError,
                 "frame of " + std::to_string(len) + " bytes exceeds the store's limit of " + std::to_string(limit) +
                     " bytes" + (c.authed ? " (ZW_STORE_MAX_FRAME)" : " for connections that have not said hello")));
    }
    if (avail - store::kHeaderBytes < len) break;
    std::string_view payload(c.in.data() + c.in_pos + store::kHeaderBytes, len);
    c.in_pos += store::kHeaderBytes + len;
    Status st = c.authed ? handle_request(id, payload) : handle_hello(c, payload);
    if (!st.ok()) return reject(id, c, st);
  }
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
  } else if (c.in_pos > 0 && c.in_pos >= c.in.size() / 2) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
}

Status Server::handle_hello(Conn& c, std::string_view payload) {
  ZW_ASSIGN_OR_RETURN(store::Request request, store::decode_request(payload));
  if (request.op != store::Op::kHello)
    return Status(Code::kAuthFailed, "the first frame of a store connection must be HELLO with the auth token");
  if (!store::tokens_equal(request.key, token_)) return Status(Code::kAuthFailed, "wrong auth token");
  c.authed = true;
  c.out += store::encode_reply(store::Reply{});
  if (!flush(c)) c.dead = true;  // noticed by the caller's loop; erased by sweep()
  ZW_TRACE(kBoot, "store client %s authenticated", c.peer.c_str());
  return Status();
}

Status Server::handle_request(uint64_t id, std::string_view payload) {
  std::vector<StoreEngine::Out> out;
  Status st = engine_.handle(id, payload, Clock::now(), &out);
  deliver(&out);
  return st;
}

void Server::deliver(std::vector<StoreEngine::Out>* out) {
  for (StoreEngine::Out& o : *out) {
    auto it = conns_.find(o.conn);
    if (it == conns_.end() || it->second.dead) continue;
    Conn& c = it->second;
    c.out += o.frame;
    if (!flush(c)) {
      kill(o.conn, c);
      continue;
    }
    dirty_.push_back(o.conn);
  }
  out->clear();
}

void Server::reject(uint64_t id, Conn& c, const Status& why) {
  warnings_.warn("dropping store connection from " + c.peer + ": " + why.message());
  c.out += store::encode_reply(store::error_reply(why));
  (void)flush(c);  // best effort: the connection is dropped either way
  kill(id, c);
}

void Server::kill(uint64_t id, Conn& c) {
  c.dead = true;
  c.fd.reset();
  engine_.forget(id);
}

void Server::expire_hellos(Clock::time_point now) {
  for (auto& [id, c] : conns_) {
    if (c.dead || c.authed || now < c.hello_deadline) continue;
    reject(id, c,
           Status(Code::kAuthFailed, "no hello within " + store::describe_timeout(hello_timeout_.count()) +
                                         " of connecting (a store client must present the auth token first)"));
  }
}

void Server::sweep() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (!it->second.dead) {
      ++it;
      continue;
    }
    engine_.forget(it->first);
    it = conns_.erase(it);
  }
}

bool is_wildcard(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> start_tcp_store_server(const TcpStoreServerOptions& options,
                                                               const TcpStoreServerTuning& tuning) {
  if (options.auth_token.empty())
    return Status(Code::kInvalidArgument, "the store's auth token must not be empty (set ZW_AUTH_TOKEN)");
  if (options.max_frame_bytes < store::kMinMaxFrame || options.max_frame_bytes > UINT32_MAX)
    return Status(Code::kInvalidArgument, "store max frame of " + std::to_string(options.max_frame_bytes) +
                                              " bytes is out of range [" + std::to_string(store::kMinMaxFrame) +
                                              ", 4G) (check ZW_STORE_MAX_FRAME)");
  ZW_ASSIGN_OR_RETURN(net::HostPort where, net::parse_host_port(options.listen_address, /*allow_zero_port=*/true));
  uint16_t port = 0;
  ZW_ASSIGN_OR_RETURN(net::Fd listener, net::listen_tcp(where, kBacklog, &port));
  ZW_TRY(net::set_nonblocking(listener.get()));
  net::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return system_error("store server: eventfd", errno);
  std::string address = net::HostPort{is_wildcard(where.host) ? net::hostname() : where.host, port}.to_string();
  ZW_INFO(kBoot, "store server listening on %s (clients connect to %s, max frame %zu bytes)",
          net::HostPort{where.host, port}.to_string().c_str(), address.c_str(), options.max_frame_bytes);
  return std::unique_ptr<TcpStoreServer>(
      new Server(std::move(listener), std::move(wake), port, std::move(address), options, tuning));
}

Result<std::unique_ptr<TcpStoreServer>> start_tcp_store_server(const TcpStoreServerOptions& options) {
  return start_tcp_store_server(options, TcpStoreServerTuning{});
}

}  // namespace zw
