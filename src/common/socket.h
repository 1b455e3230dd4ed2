// TCP socket helpers shared by the bootstrap store and the tcp transport: an owning fd, host:port parsing,
// listen/connect with deadlines, and whole-buffer send/recv that respect a Deadline.
//
// Errors name the remote address and carry the errno text. Non-goals: an event loop (users bring poll/epoll).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "zerowire/status.h"

namespace zw::net {

// Owning file descriptor; closes on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;   // name or numeric address (IPv4 or IPv6 without brackets)
  uint16_t port = 0;  // 0 = any (for listening)
  std::string to_string() const;
};

// "host:port", "[v6addr]:port". The port must be present and in 1..65535 (or 0 when allow_zero_port).
Result<HostPort> parse_host_port(std::string_view text, bool allow_zero_port = false);

// Listens on host:port (port 0 picks a free one); the bound port is written to *bound_port.
Result<Fd> listen_tcp(const HostPort& where, int backlog, uint16_t* bound_port);

// Connects, retrying refused/unreachable attempts until the deadline (the server may not be up yet).
Result<Fd> connect_tcp(const HostPort& where, Deadline deadline);

// Accepts one connection, waiting at most until the deadline; the peer's address goes to *peer.
Result<Fd> accept_tcp(int listen_fd, Deadline deadline, std::string* peer);

// Blocking-with-deadline transfers of the whole buffer; work on blocking and non-blocking sockets.
// `peer` names the other side in error messages.
Status send_all(int fd, const void* data, size_t bytes, Deadline deadline, const std::string& peer);
Status recv_all(int fd, void* data, size_t bytes, Deadline deadline, const std::string& peer);

Status set_nonblocking(int fd, bool nonblocking = true);
Status set_nodelay(int fd);
Status set_buffer_sizes(int fd, int bytes);

// The local address of the interface that routes to `remote` (no packet is sent).
Result<std::string> local_address_towards(const HostPort& remote);

// This host's name.
std::string hostname();

}  // namespace zw::net
