// TCP socket helpers.
#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>
#include <utility>

namespace zw::net {
namespace {

// Owning list from getaddrinfo. Move-only.
struct AddrInfoList {
  addrinfo* head = nullptr;
  AddrInfoList() = default;
  AddrInfoList(AddrInfoList&& other) noexcept : head(std::exchange(other.head, nullptr)) {}
  AddrInfoList& operator=(AddrInfoList&&) = delete;
  AddrInfoList(const AddrInfoList&) = delete;
  ~AddrInfoList() {
    if (head) freeaddrinfo(head);
  }
};

Result<AddrInfoList> resolve(const HostPort& where, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  AddrInfoList list;
  std::string port = std::to_string(where.port);
  int rc = getaddrinfo(where.host.empty() ? nullptr : where.host.c_str(), port.c_str(), &hints, &list.head);
  if (rc != 0)
    return Status(Code::kConnectionFailed, "cannot resolve '" + where.host + "': " + gai_strerror(rc) +
                                               " (check the host name in ZW_STORE_ADDR / MASTER_ADDR)");
  return list;
}

// Waits until fd is readable/writable (events) or the deadline; returns false on timeout.
Result<bool> wait_fd(int fd, short events, Deadline deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return system_error("poll", errno);
  }
}

std::string format_sockaddr(const sockaddr* sa) {
  char host[NI_MAXHOST] = {0}, port[NI_MAXSERV] = {0};
  socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(sa, len, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) return "?";
  return sa->sa_family == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

}  // namespace

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string HostPort::to_string() const {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                             : host + ":" + std::to_string(port);
}

Result<HostPort> parse_host_port(std::string_view text, bool allow_zero_port) {
  HostPort out;
  std::string_view port_text;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return Status(Code::kInvalidArgument, "malformed address '" + std::string(text) + "': expected [v6addr]:port");
    out.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return Status(Code::kInvalidArgument, "malformed address '" + std::string(text) + "': expected host:port");
    out.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  // Digits only (strtol took a sign and blanks, and stopped at an embedded NUL).
  unsigned port = 0;
  const char* const port_end = port_text.data() + port_text.size();
  auto [parsed_end, ec] = std::from_chars(port_text.data(), port_end, port);
  if (port_text.empty() || ec != std::errc() || parsed_end != port_end || port < (allow_zero_port ? 0u : 1u) ||
      port > 65535)
    return Status(Code::kInvalidArgument, "malformed port in address '" + std::string(text) + "'");
  if (out.host.empty())
    return Status(Code::kInvalidArgument, "missing host in address '" + std::string(text) + "'");
  // A host with a NUL would name another host than it shows (the resolver stops there); blanks, control characters
  // and brackets cannot be part of a name or an address either.
  for (char c : out.host)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '[' || c == ']')
      return Status(Code::kInvalidArgument, "malformed host in address '" + std::string(text) +
                                                "': it has a blank, control or bracket character");
  out.port = static_cast<uint16_t>(port);
  return out;
}

Result<Fd> listen_tcp(const HostPort& where, int backlog, uint16_t* bound_port) {
  ZW_ASSIGN_OR_RETURN(AddrInfoList list, resolve(where, true));
  int last_err = 0;
  for (addrinfo* ai = list.head; ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last_err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
      last_err = errno;
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    if (bound_port)
      *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
  }
  return system_error("cannot listen on " + where.to_string(), last_err);
}

Result<Fd> connect_tcp(const HostPort& where, Deadline deadline) {
  int last_err = 0;
  for (;;) {
    ZW_ASSIGN_OR_RETURN(AddrInfoList list, resolve(where, false));
    for (addrinfo* ai = list.head; ai; ai = ai->ai_next) {
      Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
      if (!fd.valid()) return system_error("socket", errno);
      int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        ZW_ASSIGN_OR_RETURN(bool ready, wait_fd(fd.get(), POLLOUT, deadline));
        if (!ready) {
          last_err = ETIMEDOUT;
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        ZW_TRY(set_nonblocking(fd.get(), false));
        return fd;
      }
      last_err = errno;
    }
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the server may still be starting
  }
  return Status(Code::kConnectionFailed, "cannot connect to " + where.to_string() + ": " + std::strerror(last_err) +
                                             " (is the server up and the address reachable?)");
}

Result<Fd> accept_tcp(int listen_fd, Deadline deadline, std::string* peer) {
  ZW_ASSIGN_OR_RETURN(bool ready, wait_fd(listen_fd, POLLIN, deadline));
  if (!ready) return Status(Code::kTimeout, "no connection arrived before the deadline");
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
  if (fd < 0) return system_error("accept", errno);
  if (peer) *peer = format_sockaddr(reinterpret_cast<sockaddr*>(&ss));
  return Fd(fd);
}

Status send_all(int fd, const void* data, size_t bytes, Deadline deadline, const std::string& peer) {
  auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ZW_ASSIGN_OR_RETURN(bool ready, wait_fd(fd, POLLOUT, deadline));
      if (!ready) return Status(Code::kTimeout, "timed out sending to " + peer);
      continue;
    }
    return Status(Code::kConnectionLost, "send to " + peer + " failed: " + std::strerror(errno));
  }
  return Status();
}

Status recv_all(int fd, void* data, size_t bytes, Deadline deadline, const std::string& peer) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status(Code::kConnectionLost, peer + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ZW_ASSIGN_OR_RETURN(bool ready, wait_fd(fd, POLLIN, deadline));
      if (!ready) return Status(Code::kTimeout, "timed out receiving from " + peer);
      continue;
    }
    return Status(Code::kConnectionLost, "receive from " + peer + " failed: " + std::strerror(errno));
  }
  return Status();
}

Status set_nonblocking(int fd, bool nonblocking) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return system_error("fcntl(F_GETFL)", errno);
  flags = nonblocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) != 0) return system_error("fcntl(F_SETFL)", errno);
  return Status();
}

Status set_nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return system_error("TCP_NODELAY", errno);
  return Status();
}

Status set_buffer_sizes(int fd, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) != 0) return system_error("SO_SNDBUF", errno);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) != 0) return system_error("SO_RCVBUF", errno);
  return Status();
}

Result<std::string> local_address_towards(const HostPort& remote) {
  ZW_ASSIGN_OR_RETURN(AddrInfoList list, resolve(remote, false));
  for (addrinfo* ai = list.head; ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid() || ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
    std::string s = format_sockaddr(reinterpret_cast<sockaddr*>(&ss));
    // Strip the port (and brackets) that format_sockaddr adds.
    size_t colon = s.rfind(':');
    s = s.substr(0, colon);
    if (!s.empty() && s.front() == '[') s = s.substr(1, s.size() - 2);
    return s;
  }
  return Status(Code::kConnectionFailed, "no local interface routes to " + remote.to_string());
}

std::string hostname() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace zw::net
