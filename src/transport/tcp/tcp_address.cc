// Addresses and sockets of the tcp transport (see tcp_address.h).
#include "transport/tcp/tcp_address.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace zw::transport::tcp {
namespace {

bool is_wildcard(const std::string& host) { return host == "0.0.0.0" || host == "::" || host == "*"; }

}  // namespace

Result<net::HostPort> choose_listen_address(const std::string& listen_addr, const std::string& store_address) {
  if (!listen_addr.empty()) {
    bool has_port = listen_addr.front() == '[' ||
                    (listen_addr.find(':') != std::string::npos && listen_addr.find(':') == listen_addr.rfind(':'));
    if (!has_port) return net::HostPort{listen_addr, 0};
    auto parsed = net::parse_host_port(listen_addr, /*allow_zero_port=*/true);
    if (!parsed.ok()) return parsed.status().with_context("ZW_TCP_LISTEN_ADDR");
    return parsed;
  }
  if (!store_address.empty()) {
    ZW_ASSIGN_OR_RETURN(net::HostPort store, net::parse_host_port(store_address));
    ZW_ASSIGN_OR_RETURN(std::string local, net::local_address_towards(store));
    return net::HostPort{local, 0};
  }
  return net::HostPort{"127.0.0.1", 0};
}

std::string advertised_address(const net::HostPort& bound, const std::string& store_address) {
  net::HostPort out = bound;
  if (is_wildcard(bound.host)) {
    out.host = net::hostname();
    if (auto store = net::parse_host_port(store_address); store.ok()) {
      if (auto local = net::local_address_towards(*store); local.ok()) out.host = *local;
    }
  }
  return out.to_string();
}

Status configure_socket(int fd, int64_t sockbuf) {
  ZW_TRY(net::set_nonblocking(fd));
  ZW_TRY(net::set_nodelay(fd));
  if (sockbuf > 0) ZW_TRY(net::set_buffer_sizes(fd, static_cast<int>(sockbuf)));
  return Status();
}

Result<net::Fd> start_connect(const net::HostPort& where, int64_t sockbuf) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  std::string port = std::to_string(where.port);
  int rc = getaddrinfo(where.host.c_str(), port.c_str(), &hints, &list);
  if (rc != 0) return Status(Code::kConnectionFailed, "cannot resolve '" + where.host + "': " + gai_strerror(rc));
  int err = 0;
  net::Fd result;
  for (addrinfo* ai = list; ai && !result.valid(); ai = ai->ai_next) {
    net::Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      err = errno;
      continue;
    }
    // Buffer sizes before connect, so that the window scale of the handshake accounts for them.
    Status configured = configure_socket(fd.get(), sockbuf);
    if (!configured.ok()) {
      freeaddrinfo(list);
      return configured.at(__FILE__, __LINE__);
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
      result = std::move(fd);
    } else {
      err = errno;
    }
  }
  freeaddrinfo(list);
  if (!result.valid())
    return Status(Code::kConnectionFailed, "cannot connect to " + where.to_string() + ": " + std::strerror(err));
  return result;
}

std::string sockaddr_string(const sockaddr* sa) {
  char host[NI_MAXHOST] = {0};
  char port[NI_MAXSERV] = {0};
  socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(sa, len, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) return "?";
  return net::HostPort{host, static_cast<uint16_t>(std::atoi(port))}.to_string();
}

int connect_error(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

}  // namespace zw::transport::tcp
