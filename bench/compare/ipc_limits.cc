// ipc_limits: the ceilings of the two ways bytes cross between processes on one host, measured in the same run
// as the collectives so that a ratio can be read against them (mem_limits.cc prints them).
//   - cma: one thread copying another process's buffer with process_vm_readv, the single copy both zerowire's
//     shm transport and Open MPI's vader use for large messages (the kernel pins the source pages per call);
//   - tcp-lo / tcp-lo-2way: one TCP stream over 127.0.0.1 (4 MiB socket buffers, as ZW_TCP_SOCKBUF), one
//     direction, and two streams in opposite directions at once (each rank of a 2-rank all-gather sends and
//     receives at the same time, one thread per process polling both directions); GB/s of payload per
//     direction. The caller picks the call size and the buffers' footprint (cache-resident or streamed).
// The peer is a forked child; the parent reads the child's memory (allowed under Yama ptrace_scope 1, which
// lets a process trace its descendants only).
// Non-goals: NUMA placement, more than two processes, tuning the socket for the best possible figure.
#include "ipc_limits.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Moves all n bytes with `call` (read or write), retrying short transfers; false on an error or end of file.
template <typename Call>
bool transfer_all(int fd, char* b, size_t n, Call call) {
  while (n > 0) {
    ssize_t k = call(fd, b, n);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool write_all(int fd, const void* p, size_t n) {
  return transfer_all(fd, const_cast<char*>(static_cast<const char*>(p)), n,
                      [](int f, char* b, size_t k) { return ::write(f, b, k); });
}

bool read_all(int fd, void* p, size_t n) {
  return transfer_all(fd, static_cast<char*>(p), n, [](int f, char* b, size_t k) { return ::read(f, b, k); });
}

// A forked child that runs `body(fd)` on its end of a socket pair and exits; the parent keeps the other end.
template <typename F>
pid_t fork_peer(int* parent_fd, F&& body) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sv[0]);
    ::_exit(body(sv[1]) ? 0 : 1);
  }
  ::close(sv[1]);
  *parent_fd = sv[0];
  return pid;
}

bool reap(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

void set_sockbuf(int fd) {
  int v = 4 << 20, one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A connected pair of loopback TCP sockets: *a in this process, *b to hand to a forked child.
bool tcp_pair(int* a, int* b) {
  int lis = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (lis < 0 || ::bind(lis, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lis, 1) != 0 ||
      ::getsockname(lis, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return false;
  *b = ::socket(AF_INET, SOCK_STREAM, 0);
  set_sockbuf(*b);
  if (*b < 0 || ::connect(*b, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return false;
  *a = ::accept(lis, nullptr, nullptr);
  ::close(lis);
  if (*a < 0) return false;
  set_sockbuf(*a);
  return true;
}

// Where the next call of at most `io` bytes starts in a buffer of `span` bytes walked round and round, and how long
// it may be.
struct Cursor {
  size_t span, io, at = 0;
  size_t len(size_t left) const { return std::min({io, span - at, left}); }
  void advance(size_t k) { at = (at + k) % span; }
};

// Streams `bytes` through `fd` (send), or reads them all (receive), in calls of at most `io` bytes.
bool stream_out(int fd, const std::vector<char>& buf, size_t io, size_t bytes) {
  Cursor c{buf.size(), io};
  for (size_t done = 0; done < bytes;) {
    size_t n = c.len(bytes - done);
    if (!write_all(fd, buf.data() + c.at, n)) return false;
    c.advance(n);
    done += n;
  }
  return true;
}
bool stream_in(int fd, std::vector<char>& buf, size_t io, size_t bytes) {
  Cursor c{buf.size(), io};
  for (size_t done = 0; done < bytes;) {
    ssize_t k = ::read(fd, buf.data() + c.at, c.len(bytes - done));
    if (k <= 0) return false;
    c.advance(static_cast<size_t>(k));
    done += static_cast<size_t>(k);
  }
  return true;
}

// Sends and receives `bytes` on one socket at once from one thread (poll, non-blocking calls), as a rank's
// progress loop does: neither direction waits for the other.
bool stream_both(int fd, const std::vector<char>& out, std::vector<char>& in, size_t io, size_t bytes) {
  size_t sent = 0, got = 0;
  Cursor tx{out.size(), io}, rx{in.size(), io};
  while (sent < bytes || got < bytes) {
    pollfd p{fd, static_cast<short>((sent < bytes ? POLLOUT : 0) | (got < bytes ? POLLIN : 0)), 0};
    if (::poll(&p, 1, 10000) <= 0) return false;
    if ((p.revents & POLLOUT) && sent < bytes) {
      ssize_t k = ::send(fd, out.data() + tx.at, tx.len(bytes - sent), MSG_DONTWAIT);
      if (k < 0 && errno != EAGAIN) return false;
      if (k > 0) sent += static_cast<size_t>(k), tx.advance(static_cast<size_t>(k));
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && got < bytes) {
      ssize_t k = ::recv(fd, in.data() + rx.at, rx.len(bytes - got), MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN)) return false;
      if (k > 0) got += static_cast<size_t>(k), rx.advance(static_cast<size_t>(k));
    }
  }
  return true;
}

}  // namespace

double cma_read_gbps(size_t bytes, size_t chunk, int runs, char* dst) {
  // The child owns the source (written after the fork, so its pages are its own), says where it is, and waits.
  int ctl = -1;
  pid_t pid = fork_peer(&ctl, [&](int fd) {
    const size_t span = std::min(bytes, chunk * 2);
    void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    ::madvise(m, span, MADV_HUGEPAGE);  // as the parent's buffers and the benchmarks' arenas
    char* p = static_cast<char*>(std::memset(m, 1, span));
    char done = 0;
    return write_all(fd, &p, sizeof p) && read_all(fd, &done, 1);
  });
  if (pid < 0) return -1;
  char* remote = nullptr;
  double best = 1e30;
  bool ok = read_all(ctl, &remote, sizeof remote);
  for (int r = 0; ok && r < runs; ++r) {
    auto t0 = Clock::now();
    for (size_t off = 0; ok && off < bytes; off += chunk) {
      const size_t n = std::min(chunk, bytes - off);
      const size_t slot = off % (chunk * 2);  // two alternating slots each side: a cache-sized chunk stays cached
      iovec local{dst + slot, n}, peer{remote + slot, n};
      ok = ::process_vm_readv(pid, &local, 1, &peer, 1, 0) == static_cast<ssize_t>(n);
    }
    best = std::min(best, seconds_since(t0));
  }
  ok = write_all(ctl, "x", 1) && ok;
  ::close(ctl);
  ok = reap(pid) && ok && dst[0] == 1;
  return ok ? bytes / best / 1e9 : -1;
}

double memcpy_chunked_gbps(size_t bytes, size_t chunk, int runs, const char* src, char* dst) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    for (size_t off = 0; off < bytes; off += chunk)
      std::memcpy(dst + off % (chunk * 2), src + off % (chunk * 2), std::min(chunk, bytes - off));
    best = std::min(best, seconds_since(t0));
  }
  return bytes / best / 1e9;
}

double tcp_loopback_gbps(size_t bytes, size_t io, size_t footprint, int runs, bool both_ways) {
  int here = -1, there = -1, ctl = -1;
  if (!tcp_pair(&here, &there)) return -1;
  // Each run: the parent says go (one byte on the control pair); the child sends `bytes` (and, both ways,
  // receives as many at the same time).
  pid_t pid = fork_peer(&ctl, [&](int fd) {
    ::close(here);
    std::vector<char> out(footprint, 7), in(footprint);
    char go = 0;
    for (int r = 0; r < runs; ++r) {
      if (!read_all(fd, &go, 1)) return false;
      if (!(both_ways ? stream_both(there, out, in, io, bytes) : stream_out(there, out, io, bytes))) return false;
    }
    return true;
  });
  ::close(there);
  if (pid < 0) return -1;
  std::vector<char> out(footprint, 9), in(footprint);
  double best = 1e30;
  bool ok = true;
  for (int r = 0; ok && r < runs; ++r) {
    auto t0 = Clock::now();
    ok = write_all(ctl, "g", 1) && (both_ways ? stream_both(here, out, in, io, bytes) : stream_in(here, in, io, bytes));
    ok = ok && in[0] == 7;
    best = std::min(best, seconds_since(t0));
  }
  ::close(here);
  ::close(ctl);
  ok = reap(pid) && ok;
  return ok ? bytes / best / 1e9 : -1;
}
