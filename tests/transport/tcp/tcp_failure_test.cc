// Error tests of the tcp transport: local bounds checks, a forged key caught by the receiver, rejected
// hellos, connect timeouts and refusals, and a peer that dies (a destroyed transport, a SIGKILLed process).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/socket.h"
#include "tcp_test_util.h"
#include "transport/tcp/tcp_memory_region.h"
#include "transport/tcp/tcp_wire.h"

namespace zw::transport::tcp_test {
namespace {

#define EXPECT_MESSAGE_HAS(status, text)                      \
  EXPECT_NE((status).message().find(text), std::string::npos) \
      << "missing '" << (text) << "' in " << (status).to_string()

TEST(TcpErrors, OutOfBoundsWritesAreRejectedLocallyWithTheNumbers) {
  auto w = make_world(2, 1);
  ASSERT_TRUE(w);
  std::vector<std::byte> src(64), dst(128);
  auto src_mr = std::move(w->t(0).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(1).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  auto key = dst_mr->remote_key();
  Endpoint& e = w->e(0, 1);

  Status local = e.write(*src_mr, 10, key, 0, 60, 1);
  EXPECT_EQ(local.code(), Code::kInvalidArgument);
  EXPECT_MESSAGE_HAS(local, "offset 10 + 60 bytes");
  EXPECT_MESSAGE_HAS(local, "64 bytes");
  EXPECT_MESSAGE_HAS(local, "rank 1");

  Status remote = e.write(*src_mr, 0, key, 100, 29, 1);
  EXPECT_EQ(remote.code(), Code::kInvalidArgument);
  EXPECT_MESSAGE_HAS(remote, "offset 100 + 29 bytes");
  EXPECT_MESSAGE_HAS(remote, "128 bytes");

  Status huge = e.write(*src_mr, 0, key, SIZE_MAX - 2, 4, 1);
  EXPECT_EQ(huge.code(), Code::kInvalidArgument);

  std::vector<std::byte> garbage(7);
  EXPECT_EQ(e.write(*src_mr, 0, garbage, 0, 1, 1).code(), Code::kInvalidArgument);
  auto own_key = src_mr->remote_key();  // a key of rank 0's region, not of the peer's
  Status wrong_rank = e.write(*src_mr, 0, own_key, 0, 1, 1);
  EXPECT_EQ(wrong_rank.code(), Code::kInvalidArgument);
  EXPECT_MESSAGE_HAS(wrong_rank, "rank 0");

  std::string too_long(Message::kMaxControl + 1, 'x');
  Status control = e.send(bytes_of(too_long));
  EXPECT_EQ(control.code(), Code::kInvalidArgument);
  EXPECT_MESSAGE_HAS(control, "241");

  MemRef device{dst.data(), dst.size(), MemKind::kCudaDevice, 0};
  EXPECT_EQ(w->t(0).register_memory(device).status().code(), Code::kUnsupported);

  // Local rejections are not sticky: the endpoint still works.
  EXPECT_EQ(e.writes_posted(), 0u);
  fill_pattern(src, 0);
  ZW_ASSERT_OK(e.write(*src_mr, 0, key, 64, 64, 77));
  auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(10));
  ZW_ASSERT_OK(m);
  EXPECT_EQ(m->notify, 77u);
  for (size_t b = 0; b < 64; ++b) ASSERT_EQ(dst[64 + b], pattern(0, b));
  ZW_ASSERT_OK(wait_writes_completed(w->t(0), e, Deadline::after_seconds(10)));  // src may go now
}

// A key claiming more bytes than the region has passes the sender's check; the receiver must refuse it.
TEST(TcpErrors, ForgedKeyIsCaughtByTheReceiver) {
  auto w = make_world(2, 1);
  ASSERT_TRUE(w);
  std::vector<std::byte> src(4096), dst(1024, std::byte{0xEE}), guard(4096, std::byte{0xEE});
  auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  tcp::RemoteKey forged = std::move(tcp::decode_key(dst_mr->remote_key())).value();
  forged.length = 1u << 20;
  ZW_ASSERT_OK(w->e(1, 0).write(*src_mr, 0, tcp::encode_key(forged), 512, 4096, 5));
  auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(10));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kRemoteAccess);
  EXPECT_MESSAGE_HAS(m.status(), "peer rank 1 wrote outside registered region");
  EXPECT_MESSAGE_HAS(m.status(), "offset 512 + 4096 bytes > region length 1024");
  for (std::byte b : dst) ASSERT_EQ(b, std::byte{0xEE});  // nothing was received into the region
  // Sticky, and the dropped connection is seen by the writer.
  EXPECT_EQ(w->e(0, 1).error().code(), Code::kRemoteAccess);
  EXPECT_EQ(w->e(0, 1).send(bytes_of("x")).code(), Code::kRemoteAccess);
  auto lost = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(10));
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), Code::kConnectionLost);
}

// Connects a raw socket to `address`, sends `hello` and reports whether the transport closed the socket.
bool hello_is_rejected(const std::string& address, const tcp::Hello& hello) {
  auto where = net::parse_host_port(address);
  if (!where.ok()) return false;
  auto fd = net::connect_tcp(*where, Deadline::after_seconds(5));
  if (!fd.ok()) return false;
  if (!net::send_all(fd->get(), &hello, sizeof hello, Deadline::after_seconds(5), address).ok()) return false;
  char byte;
  Status st = net::recv_all(fd->get(), &byte, 1, Deadline::after_seconds(5), address);
  return st.code() == Code::kConnectionLost;  // closed (not answered, not timed out)
}

TEST(TcpErrors, BadHellosAreRejectedAndTheTransportKeepsWorking) {
  auto w = make_transports(2, 2);
  ASSERT_TRUE(w);
  tcp::Hello good{};
  good.magic = tcp::kHelloMagic;
  good.version = tcp::kWireVersion;
  good.conn_index = 0;
  good.conn_count = 2;
  good.rank = 1;
  good.job_hash = tcp::job_hash(w->job_id);

  tcp::Hello other_job = good;
  other_job.job_hash = tcp::job_hash(w->job_id + "-other");
  EXPECT_TRUE(hello_is_rejected(w->addresses[0], other_job));
  tcp::Hello bad_magic = good;
  bad_magic.magic = 0x12345678;
  EXPECT_TRUE(hello_is_rejected(w->addresses[0], bad_magic));
  tcp::Hello bad_rank = good;
  bad_rank.rank = 7;
  EXPECT_TRUE(hello_is_rejected(w->addresses[0], bad_rank));
  tcp::Hello lower_rank = good;
  lower_rank.rank = 0;
  EXPECT_TRUE(hello_is_rejected(w->addresses[0], lower_rank));
  tcp::Hello bad_count = good;
  bad_count.conn_count = 3;
  EXPECT_TRUE(hello_is_rejected(w->addresses[0], bad_count));

  // The real pair still connects and moves data.
  for (int r = 0; r < 2; ++r) {
    auto e = w->t(r).connect(1 - r, w->addresses[static_cast<size_t>(1 - r)]);
    ZW_ASSERT_OK(e);
    w->ep[r][1 - r] = std::move(e).value();
  }
  for (int r = 0; r < 2; ++r) ZW_ASSERT_OK(w->e(r, 1 - r).wait_connected(Deadline::after_seconds(10)));
  std::vector<std::byte> src(1u << 20), dst(1u << 20);
  fill_pattern(src, 1);
  auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  ZW_ASSERT_OK(w->e(1, 0).write(*src_mr, 0, dst_mr->remote_key(), 0, src.size(), 9));
  auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(10));
  ZW_ASSERT_OK(m);
  EXPECT_EQ(m->notify, 9u);
  EXPECT_TRUE(src == dst);
  ZW_ASSERT_OK(wait_writes_completed(w->t(1), w->e(1, 0), Deadline::after_seconds(10)));
}

TEST(TcpErrors, WaitConnectedTimesOutNamingThePeer) {
  auto w = make_transports(2, 1);
  ASSERT_TRUE(w);
  auto e = w->t(0).connect(1, "127.0.0.1:1");  // rank 1 never connects to rank 0
  ZW_ASSERT_OK(e);
  Status st = (*e)->wait_connected(Deadline::after_seconds(0.2));
  EXPECT_EQ(st.code(), Code::kTimeout);
  EXPECT_MESSAGE_HAS(st, "rank 1 (127.0.0.1:1)");
  EXPECT_MESSAGE_HAS(st, "0 of 1 connections up");
}

TEST(TcpErrors, RefusedConnectNamesTheAddress) {
  auto w = make_transports(2, 1);
  ASSERT_TRUE(w);
  uint16_t port = 0;
  { auto closed = net::listen_tcp({"127.0.0.1", 0}, 1, &port); }
  std::string address = "127.0.0.1:" + std::to_string(port);
  auto e = w->t(1).connect(0, address);
  Status st = e.ok() ? (*e)->wait_connected(Deadline::after_seconds(10)) : e.status();
  EXPECT_EQ(st.code(), Code::kConnectionFailed);
  EXPECT_MESSAGE_HAS(st, address);
  EXPECT_MESSAGE_HAS(st, "rank 0");
}

TEST(TcpErrors, ConnectIsValidated) {
  auto w = make_transports(2, 1);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->t(0).connect(0, w->addresses[0]).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(w->t(0).connect(2, w->addresses[0]).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(w->t(0).connect(1, "no-port").status().code(), Code::kInvalidArgument);
  auto first = w->t(0).connect(1, w->addresses[1]);
  ZW_ASSERT_OK(first);
  Status twice = w->t(0).connect(1, w->addresses[1]).status();
  EXPECT_EQ(twice.code(), Code::kInvalidArgument);
  EXPECT_MESSAGE_HAS(twice, "already");
}

// A transport destroyed on purpose says goodbye: the peer's endpoint fails with kConnectionLost (logged at
// INFO, not WARN), and the peer is not reported dead.
TEST(TcpErrors, DestroyedPeerIsReportedAsClosed) {
  auto w = make_world(2, 3);
  ASSERT_TRUE(w);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    w->ep[1][0].reset();
    w->transports[1].reset();
  });
  auto start = std::chrono::steady_clock::now();
  w->t(0).wait_for_activity(std::chrono::seconds(10));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  killer.join();
  auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(10));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kConnectionLost);
  EXPECT_MESSAGE_HAS(m.status(), "connection to rank 1 (" + w->addresses[1] + ") lost");
  EXPECT_MESSAGE_HAS(m.status(), "on purpose");
  EXPECT_EQ(w->e(0, 1).send(bytes_of("x")).code(), Code::kConnectionLost);
  EXPECT_FALSE(w->t(0).peer_known_dead(1, nullptr));
}

// A writer that destroys its endpoint right after its writes completed locally (the bytes may still sit in
// socket buffers of several connections) must not lose them: every stripe arrives before the error.
TEST(TcpErrors, WritesCompletedBeforeClosingStillArrive) {
  constexpr int kWrites = 4;
  constexpr size_t kBytes = 8u << 20;
  auto w = make_world(2, 3);
  ASSERT_TRUE(w);
  std::vector<std::byte> src(kBytes), dst(kBytes * kWrites, std::byte{0xEE});
  fill_pattern(src, 1);
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  {
    auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
    for (int i = 0; i < kWrites; ++i)
      ZW_ASSERT_OK(w->e(1, 0).write(*src_mr, 0, dst_mr->remote_key(), kBytes * i, kBytes, 100 + i));
    ZW_ASSERT_OK(wait_writes_completed(w->t(1), w->e(1, 0), Deadline::after_seconds(10)));
    w->ep[1][0].reset();
    w->transports[1].reset();
  }
  for (int i = 0; i < kWrites; ++i) {
    auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(10));
    ZW_ASSERT_OK(m);
    EXPECT_EQ(m->notify, static_cast<uint64_t>(100 + i));
  }
  for (size_t b = 0; b < dst.size(); ++b) ASSERT_EQ(dst[b], pattern(1, b % kBytes)) << "byte " << b;
  auto closed = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(10));
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.status().code(), Code::kConnectionLost);
  EXPECT_MESSAGE_HAS(closed.status(), "on purpose");
}

// --- real processes ---

bool write_line(int fd, const std::string& line) {
  std::string s = line + "\n";
  return ::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
}

std::string read_line(int fd, Deadline deadline) {
  std::string out;
  char c;
  while (!deadline.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, deadline.remaining_ms()) <= 0) continue;
    if (::read(fd, &c, 1) != 1) return "";
    if (c == '\n') return out;
    out += c;
  }
  return "";
}

// Rank 1 in a child process: connects to the parent, says "ready", then waits to be killed.
int child_main(const std::string& job_id, int from_parent, int to_parent) {
  TcpOptions tcp;
  tcp.conns_per_peer = 2;
  auto t = create_tcp_transport(options_for(1, 2, job_id), tcp);
  if (!t.ok()) return 2;
  auto address = (*t)->listen();
  if (!address.ok() || !write_line(to_parent, *address)) return 3;
  std::string parent = read_line(from_parent, Deadline::after_seconds(10));
  auto e = (*t)->connect(0, parent);
  if (!e.ok() || !(*e)->wait_connected(Deadline::after_seconds(10)).ok()) return 4;
  if (!(*e)->send(bytes_of("ready")).ok()) return 5;
  for (;;) ::pause();
}

TEST(TcpProcesses, KilledPeerIsReportedWithRankAndAddress) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  const std::string job_id = random_job_id();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(to_child[1]);
    ::close(to_parent[0]);
    ::_exit(child_main(job_id, to_child[0], to_parent[1]));
  }
  ::close(to_child[0]);
  ::close(to_parent[1]);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{pid};

  TcpOptions tcp;
  tcp.conns_per_peer = 2;
  auto t = create_tcp_transport(options_for(0, 2, job_id), tcp);
  ZW_ASSERT_OK(t);
  auto address = (*t)->listen();
  ZW_ASSERT_OK(address);
  ASSERT_TRUE(write_line(to_child[1], *address));
  std::string child_address = read_line(to_parent[0], Deadline::after_seconds(10));
  ASSERT_FALSE(child_address.empty()) << "the child did not report its address";
  auto e = (*t)->connect(1, child_address);
  ZW_ASSERT_OK(e);
  ZW_ASSERT_OK((*e)->wait_connected(Deadline::after_seconds(10)));
  auto ready = next_message(**t, **e, Deadline::after_seconds(10));
  ZW_ASSERT_OK(ready);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ready->data.data()), ready->size), "ready");

  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto start = std::chrono::steady_clock::now();
  auto lost = next_message(**t, **e, Deadline::after_seconds(10));
  ASSERT_FALSE(lost.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(lost.status().code(), Code::kConnectionLost) << lost.status().to_string();
  EXPECT_MESSAGE_HAS(lost.status(), "connection to rank 1 (" + child_address + ") lost");
  EXPECT_MESSAGE_HAS(lost.status(), "exited or was killed");
  EXPECT_EQ((*e)->error().code(), Code::kConnectionLost);
  std::string why;
  EXPECT_TRUE((*t)->peer_known_dead(1, &why));
  EXPECT_NE(why.find("rank 1"), std::string::npos) << why;
  EXPECT_FALSE((*t)->peer_known_dead(0, nullptr));
  ::close(to_child[1]);
  ::close(to_parent[0]);
}

}  // namespace
}  // namespace zw::transport::tcp_test
