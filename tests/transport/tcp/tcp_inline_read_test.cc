// Tests of the tcp transport's inline reads: a caller waiting in wait_for_activity() reads the sockets itself,
// the progress thread reads whatever arrives while no caller does (and again once a caller stopped waiting).
// Frames split across reads (writes larger than the 8 KiB staging buffer) and read partly by callers, partly by
// the progress thread, keep their order and bytes in both directions at once; a read error a caller meets (a
// peer gone mid-frame, a frame the receiver rejects) still becomes the sticky error naming the peer, and
// nothing hangs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tcp_test_util.h"
#include "transport/tcp/tcp_memory_region.h"

namespace zw::transport::tcp_test {
namespace {

#define EXPECT_MESSAGE_HAS(status, text)                      \
  EXPECT_NE((status).message().find(text), std::string::npos) \
      << "missing '" << (text) << "' in " << (status).to_string()

constexpr int64_t kTinySockbuf = 4096;  // a large write cannot leave at once
constexpr int kMessages = 300;

// Message i of a flood: a control message for i % 3 == 0, else a write of a size that varies from a few bytes
// to 200 KiB (most of them cross several reads), landing at its own offset.
size_t write_bytes(int i) { return i % 3 == 0 ? 0 : 1 + static_cast<size_t>(i) * 7919 % (200 << 10); }

size_t write_offset(int i) {
  size_t offset = 0;
  for (int j = 0; j < i; ++j) offset += write_bytes(j);
  return offset;
}

struct Side {
  std::vector<std::byte> src, dst;
  std::unique_ptr<MemoryRegion> src_mr, dst_mr;
};

// Sends the flood from `rank` to `peer` while receiving the peer's flood and checking its order. The receiver
// either waits in wait_for_activity (it reads inline) or sleeps (the progress thread reads), at random.
void flood(World& w, int rank, int peer, Side& me, std::vector<std::byte> peer_key, double seconds,
           std::string* failure) {
  Endpoint& e = w.e(rank, peer);
  std::mt19937 rng(static_cast<uint32_t>(rank) + 11);
  int sent = 0, received = 0;
  Deadline deadline = Deadline::after_seconds(seconds);
  while ((sent < kMessages || received < kMessages) && failure->empty()) {
    if (deadline.expired()) {
      *failure = "rank " + std::to_string(rank) + " timed out: sent " + std::to_string(sent) + ", received " +
                 std::to_string(received) + ", its writes completed " + std::to_string(e.writes_completed()) + " of " +
                 std::to_string(e.writes_posted()) + ", error " + e.error().to_string();
      return;
    }
    if (sent < kMessages) {
      Status st = write_bytes(sent) == 0
                      ? e.send(bytes_of("c" + std::to_string(sent)))
                      : e.write(*me.src_mr, write_offset(sent), peer_key, write_offset(sent), write_bytes(sent),
                                static_cast<uint64_t>(sent));
      if (!st.ok()) *failure = st.to_string();
      ++sent;
    }
    Message m;
    Result<bool> got = e.poll(&m);
    if (!got.ok()) *failure = got.status().to_string();
    if (!got.ok() || !*got) {
      if (rng() % 4 == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      else if (sent == kMessages)
        w.t(rank).wait_for_activity(std::chrono::milliseconds(5));
      continue;
    }
    const int i = received++;
    if (write_bytes(i) == 0) {
      std::string text(reinterpret_cast<const char*>(m.data.data()), m.size);
      if (m.kind != MessageKind::kControl || text != "c" + std::to_string(i))
        *failure = "rank " + std::to_string(rank) + " message " + std::to_string(i) + ": expected control c" +
                   std::to_string(i) + ", got kind " + std::to_string(static_cast<int>(m.kind)) + " '" + text + "'";
    } else if (m.kind != MessageKind::kNotify || m.notify != static_cast<uint64_t>(i)) {
      *failure = "rank " + std::to_string(rank) + " message " + std::to_string(i) + ": expected the notify of write " +
                 std::to_string(i) + ", got kind " + std::to_string(static_cast<int>(m.kind)) + " notify " +
                 std::to_string(m.notify);
    }
  }
}

// Both ranks flood each other while an extra thread per rank also waits for activity (a second inline reader
// contending for the same sockets). Every message arrives once, in order, and every write's bytes land.
void flood_both_ways(int conns_per_peer, int64_t sockbuf, double seconds) {
  auto w = make_world(2, conns_per_peer, sockbuf);
  ASSERT_TRUE(w);
  const size_t total = write_offset(kMessages);
  Side side[2];
  for (int r = 0; r < 2; ++r) {
    side[r].src.resize(total);
    side[r].dst.assign(total, std::byte{0});
    fill_pattern(side[r].src, r, 5);
    side[r].src_mr = std::move(w->t(r).register_memory(MemRef::host(side[r].src.data(), total))).value();
    side[r].dst_mr = std::move(w->t(r).register_memory(MemRef::host(side[r].dst.data(), total))).value();
  }
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  std::string failure[2];
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back(
        [&, r] { flood(*w, r, 1 - r, side[r], side[1 - r].dst_mr->remote_key(), seconds, &failure[r]); });
    threads.emplace_back([&, r] {
      while (!done) w->t(r).wait_for_activity(std::chrono::milliseconds(1));
    });
  }
  threads[0].join();
  threads[2].join();
  done = true;
  threads[1].join();
  threads[3].join();
  EXPECT_EQ(failure[0], "");
  EXPECT_EQ(failure[1], "");
  for (int r = 0; r < 2; ++r) {
    ZW_ASSERT_OK(wait_writes_completed(w->t(r), w->e(r, 1 - r), Deadline::after_seconds(seconds)));
    EXPECT_TRUE(side[r].dst == side[1 - r].src) << "rank " << r << " received misplaced bytes";
  }
}

class TcpInlineRead : public ::testing::TestWithParam<int> {};

// With 1 connection the spinning caller reads alone; with 5 (more than the engine quiets) the progress thread
// keeps reading alongside it. Default socket buffers.
TEST_P(TcpInlineRead, FloodBothWaysWithCallersAndProgressThreadReading) { flood_both_ways(GetParam(), -1, 60); }

// The same flood through 4 KiB socket buffers, where almost every frame leaves in pieces and both sides' send
// queues stay full for the whole run: it must finish within seconds.
TEST_P(TcpInlineRead, FloodBothWaysThroughTinySocketBuffers) { flood_both_ways(GetParam(), kTinySockbuf, 20); }

INSTANTIATE_TEST_SUITE_P(ConnsPerPeer, TcpInlineRead, ::testing::Values(1, 5),
                         [](const auto& info) { return std::to_string(info.param) + "conns"; });

// A waiting caller takes the sockets' input away from the progress thread only while it spins: once its wait
// ended, messages that arrive while nobody waits are still read (by the progress thread) and can be polled.
TEST(TcpInlineReadQuiet, ProgressThreadReadsAgainAfterACallerStoppedWaiting) {
  auto w = make_world(2, 1);
  ASSERT_TRUE(w);
  for (int i = 0; i < 20; ++i) {
    w->t(0).wait_for_activity(std::chrono::microseconds(50));  // spins, finds nothing, gives the input back
    ZW_ASSERT_OK(w->e(1, 0).send(bytes_of("m" + std::to_string(i))));
    Message m;
    Result<bool> got = false;
    Deadline deadline = Deadline::after_seconds(10);
    while ((got = w->e(0, 1).poll(&m)).ok() && !*got && !deadline.expired())
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    ZW_ASSERT_OK(got);
    ASSERT_TRUE(*got) << "message " << i << " was never read while nobody waited";
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data.data()), m.size), "m" + std::to_string(i));
  }
}

// The writer's transport is destroyed in the middle of a large frame while the receiver waits (reading
// inline): the receiver fails with kConnectionLost naming the peer, within seconds.
TEST(TcpInlineReadErrors, PeerGoneMidFrameIsAStickyErrorNamingIt) {
  auto w = make_world(2, 1, kTinySockbuf);
  ASSERT_TRUE(w);
  const size_t bytes = size_t{32} << 20;
  std::vector<std::byte> src(bytes), dst(bytes);
  auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  const std::string address1 = w->addresses[1];
  ZW_ASSERT_OK(w->e(1, 0).write(*src_mr, 0, dst_mr->remote_key(), 0, bytes, 1));
  ASSERT_LT(w->e(1, 0).writes_completed(), w->e(1, 0).writes_posted()) << "32 MiB went out whole at once";
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    w->ep[1][0].reset();
    w->transports[1].reset();
  });
  auto start = std::chrono::steady_clock::now();
  auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(20));
  killer.join();
  ASSERT_FALSE(m.ok()) << "the write arrived whole before its writer went away";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(m.status().code(), Code::kConnectionLost) << m.status().to_string();
  EXPECT_MESSAGE_HAS(m.status(), "connection to rank 1 (" + address1 + ") lost");
  EXPECT_EQ(w->e(0, 1).error().code(), Code::kConnectionLost);
}

// A frame the receiver rejects, met while a caller reads inline and nothing more arrives afterwards: the
// progress thread still acts on the caller's error (the peer fails, naming it, instead of a silent hang).
TEST(TcpInlineReadErrors, RejectedFrameMetInlineFailsThePeer) {
  for (int round = 0; round < 5; ++round) {
    auto w = make_world(2, 1);
    ASSERT_TRUE(w);
    std::vector<std::byte> src(256), dst(64);
    auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
    auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
    tcp::RemoteKey forged = std::move(tcp::decode_key(dst_mr->remote_key())).value();
    forged.length = 1u << 20;
    // A caller keeps spinning in wait_for_activity (short waits never sleep) while the bad frame arrives, so it
    // usually meets the error itself, before the progress thread looks at the socket.
    std::thread waiter([&] {
      Deadline until = Deadline::after_seconds(0.02);
      while (!until.expired()) w->t(0).wait_for_activity(std::chrono::microseconds(10));
    });
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    ZW_ASSERT_OK(w->e(1, 0).write(*src_mr, 0, tcp::encode_key(forged), 128, 128, 9));
    waiter.join();
    Message m;
    Deadline deadline = Deadline::after_seconds(10);
    Result<bool> got = false;
    // Polls only: no caller reads any more, so only the progress thread can turn the error into a failure.
    while ((got = w->e(0, 1).poll(&m)).ok() && !*got && !deadline.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_FALSE(got.ok()) << "round " << round << ": the rejected frame never failed the peer";
    EXPECT_EQ(got.status().code(), Code::kRemoteAccess) << got.status().to_string();
    EXPECT_MESSAGE_HAS(got.status(), "peer rank 1 wrote outside registered region");
  }
}

}  // namespace
}  // namespace zw::transport::tcp_test
