// Helpers for the shm tests whose rank 1 is a fork()ed child: length-prefixed strings over a descriptor pair,
// connecting one side of a two-rank world, and the child's way of reporting a failure (exit code + stderr line).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/clock.h"
#include "transport/shm/shm_transport.h"
#include "transport/transport.h"

namespace zw::transport::shm_test {

inline bool put(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  return ::write(fd, &n, 4) == 4 && ::write(fd, s.data(), n) == static_cast<ssize_t>(n);
}

inline bool get(int fd, std::string* s) {
  uint32_t n = 0;
  if (::read(fd, &n, 4) != 4) return false;
  s->resize(n);
  for (size_t done = 0; done < n;) {
    ssize_t got = ::read(fd, s->data() + done, n - done);
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

[[noreturn]] inline void child_fail(int code, const std::string& what) {
  std::fprintf(stderr, "shm test child: %s\n", what.c_str());
  ::_exit(code);
}

struct Side {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Endpoint> endpoint;
};

// Creates rank `rank` of a world of two, trades addresses (reading in_fd, writing out_fd: the two ends of pipes,
// or one socket twice) and connects to the other rank.
inline Result<Side> connect_side(int rank, const std::string& job, int in_fd, int out_fd) {
  Side side;
  ZW_ASSIGN_OR_RETURN(side.transport, create_shm_transport(TransportOptions{rank, 2, job, ""}));
  ZW_ASSIGN_OR_RETURN(std::string mine, side.transport->listen());
  std::string theirs;
  if (!put(out_fd, mine) || !get(in_fd, &theirs)) return Status(Code::kInternal, "address exchange failed");
  ZW_ASSIGN_OR_RETURN(side.endpoint, side.transport->connect(1 - rank, theirs));
  ZW_TRY(side.endpoint->wait_connected(Deadline::after_seconds(10)));
  return side;
}

}  // namespace zw::transport::shm_test
