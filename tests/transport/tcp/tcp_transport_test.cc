// Data-path tests of the tcp transport with ranks as threads: writes of every size verified byte for byte
// over 1 and 3 connections per peer, notify values, control messages in order, many writes in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "tcp_test_util.h"

namespace zw::transport::tcp_test {
namespace {

class TcpConns : public ::testing::TestWithParam<int> {};

TEST(TcpTransport, CapsAndListenAddress) {
  auto w = make_transports(1, 1);
  ASSERT_TRUE(w);
  const Caps& caps = w->t(0).caps();
  EXPECT_STREQ(w->t(0).name(), "tcp");
  EXPECT_GE(caps.max_write_bytes, size_t{1} << 32);
  EXPECT_EQ(caps.max_control_bytes, Message::kMaxControl);
  EXPECT_FALSE(caps.one_sided);
  EXPECT_TRUE(caps.host_memory);
  EXPECT_FALSE(caps.device_memory);
  EXPECT_TRUE(caps.any_memory_remote);
  EXPECT_EQ(w->addresses[0].rfind("127.0.0.1:", 0), 0u) << w->addresses[0];
  auto again = w->t(0).listen();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, w->addresses[0]);
}

TEST(TcpTransport, ListenAddressFollowsTheStore) {
  TcpOptions tcp;
  tcp.conns_per_peer = 1;
  TransportOptions o = options_for(0, 1, random_job_id());
  o.store_address = "127.0.0.1:29500";
  auto t = create_tcp_transport(o, tcp);
  ZW_ASSERT_OK(t);
  auto address = (*t)->listen();
  ZW_ASSERT_OK(address);
  EXPECT_EQ(address->rfind("127.0.0.1:", 0), 0u) << *address;
}

// Both ranks write every size to each other at once; each size lands in its own poisoned slice at an odd
// offset, and the bytes around it must stay poisoned.
TEST_P(TcpConns, WritesOfEverySizeArriveIntact) {
  const std::vector<size_t> sizes = {
      0,        1,       2, 7, 4095, 4096, 65537, (256u << 10) - 1, 256u << 10, (256u << 10) + 1, (1u << 20) + 3,
      3u << 20, 8u << 20};
  size_t total = 0;
  for (size_t s : sizes) total += s + 16;
  auto w = make_world(2, GetParam());
  ASSERT_TRUE(w);
  std::vector<std::vector<std::byte>> src(2, std::vector<std::byte>(8u << 20));
  std::vector<std::vector<std::byte>> dst(2, std::vector<std::byte>(total, std::byte{0xEE}));
  std::vector<std::unique_ptr<MemoryRegion>> src_mr, dst_mr;
  for (int r = 0; r < 2; ++r) {
    fill_pattern(src[r], r);
    auto s = w->t(r).register_memory(MemRef::host(src[r].data(), src[r].size()));
    auto d = w->t(r).register_memory(MemRef::host(dst[r].data(), dst[r].size()));
    ZW_ASSERT_OK(s);
    ZW_ASSERT_OK(d);
    src_mr.push_back(std::move(s).value());
    dst_mr.push_back(std::move(d).value());
  }
  auto rank_main = [&](int r) {
    int p = 1 - r;
    auto key = dst_mr[p]->remote_key();
    size_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t n = sizes[i], at = offset + 7;
      ZW_ASSERT_OK(w->e(r, p).write(*src_mr[r], 3, key, at, std::min(n, src[r].size() - 3), 1000 + i));
      auto m = next_message(w->t(r), w->e(r, p), Deadline::after_seconds(10));
      ZW_ASSERT_OK(m);
      ASSERT_EQ(m->kind, MessageKind::kNotify);
      ASSERT_EQ(m->notify, 1000 + i) << "size " << n;
      const size_t len = std::min(n, src[p].size() - 3);
      for (size_t b = 0; b < len; ++b)
        ASSERT_EQ(dst[r][at + b], pattern(p, b + 3)) << "size " << n << " byte " << b << " rank " << r;
      ASSERT_EQ(dst[r][at - 1], std::byte{0xEE}) << "size " << n;
      ASSERT_EQ(dst[r][at + len], std::byte{0xEE}) << "size " << n;
      offset += n + 16;
    }
    ZW_ASSERT_OK(wait_writes_completed(w->t(r), w->e(r, p), Deadline::after_seconds(10)));
    EXPECT_EQ(w->e(r, p).writes_posted(), sizes.size());
    EXPECT_EQ(w->e(r, p).writes_completed(), sizes.size());
  };
  std::thread t1(rank_main, 1);
  rank_main(0);
  t1.join();
}

// Four ranks post many writes to every peer without waiting, then check every notify and every byte.
TEST_P(TcpConns, ManyWritesInFlightBetweenAllPairs) {
  constexpr int kWorld = 4, kWrites = 40;
  const std::vector<size_t> sizes = {1, 999, 65541, (256u << 10) + 3, 600001};
  auto size_of = [&](int k) { return sizes[static_cast<size_t>(k) % sizes.size()]; };
  size_t per_sender = 0;
  for (int k = 0; k < kWrites; ++k) per_sender += size_of(k);
  auto w = make_world(kWorld, GetParam());
  ASSERT_TRUE(w);
  std::vector<std::vector<std::byte>> src(kWorld), dst(kWorld);
  std::vector<std::unique_ptr<MemoryRegion>> src_mr, dst_mr;
  for (int r = 0; r < kWorld; ++r) {
    src[r].resize(per_sender);
    fill_pattern(src[r], r);
    dst[r].assign(per_sender * kWorld, std::byte{0xEE});
    src_mr.push_back(std::move(w->t(r).register_memory(MemRef::host(src[r].data(), src[r].size()))).value());
    dst_mr.push_back(std::move(w->t(r).register_memory(MemRef::host(dst[r].data(), dst[r].size()))).value());
  }
  auto rank_main = [&](int r) {
    for (int p = 0; p < kWorld; ++p) {
      if (p == r) continue;
      auto key = dst_mr[p]->remote_key();
      size_t offset = 0;
      for (int k = 0; k < kWrites; ++k) {
        uint64_t notify = (static_cast<uint64_t>(r) << 32) | static_cast<uint64_t>(k);
        ZW_ASSERT_OK(w->e(r, p).write(*src_mr[r], offset, key, per_sender * r + offset, size_of(k), notify));
        offset += size_of(k);
      }
    }
    for (int p = 0; p < kWorld; ++p) {
      if (p == r) continue;
      std::set<uint64_t> seen;
      while (seen.size() < kWrites) {
        auto m = next_message(w->t(r), w->e(r, p), Deadline::after_seconds(15));
        ZW_ASSERT_OK(m);
        ASSERT_EQ(m->kind, MessageKind::kNotify);
        ASSERT_EQ(m->notify >> 32, static_cast<uint64_t>(p));
        ASSERT_TRUE(seen.insert(m->notify).second) << "duplicate notify " << m->notify;
      }
      EXPECT_EQ(*seen.rbegin() & 0xffffffffu, static_cast<uint64_t>(kWrites - 1));
      for (size_t b = 0; b < per_sender; ++b)
        ASSERT_EQ(dst[r][per_sender * p + b], pattern(p, b)) << "from rank " << p << " byte " << b;
      ZW_ASSERT_OK(wait_writes_completed(w->t(r), w->e(r, p), Deadline::after_seconds(15)));
      EXPECT_EQ(w->e(r, p).writes_completed(), static_cast<uint64_t>(kWrites));
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < kWorld; ++r) threads.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(ConnsPerPeer, TcpConns, ::testing::Values(1, 3),
                         [](const auto& info) { return std::to_string(info.param) + "conns"; });

// Control messages and small writes travel on connection 0 and must arrive in posting order, even with
// three connections per peer.
TEST(TcpTransport, ControlMessagesAndSmallWritesKeepTheirOrder) {
  auto w = make_world(2, 3);
  ASSERT_TRUE(w);
  std::vector<std::byte> src(4096), dst(4096);
  fill_pattern(src, 1);
  auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  auto key = dst_mr->remote_key();
  constexpr int kCount = 600;
  std::thread sender([&] {
    for (int i = 0; i < kCount; ++i) {
      if (i % 3 == 2) {
        ZW_ASSERT_OK(w->e(1, 0).write(*src_mr, 0, key, 0, 100, static_cast<uint64_t>(i)));
        continue;
      }
      std::string payload(static_cast<size_t>(i) % (Message::kMaxControl + 1), '\0');
      for (size_t b = 0; b < payload.size(); ++b) payload[b] = static_cast<char>('a' + (i + b) % 26);
      if (payload.size() >= 4) std::memcpy(payload.data(), &i, sizeof i);
      ZW_ASSERT_OK(w->e(1, 0).send(bytes_of(payload)));
    }
  });
  for (int i = 0; i < kCount; ++i) {
    auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(10));
    ZW_ASSERT_OK(m);
    if (i % 3 == 2) {
      ASSERT_EQ(m->kind, MessageKind::kNotify) << "message " << i;
      ASSERT_EQ(m->notify, static_cast<uint64_t>(i));
      continue;
    }
    ASSERT_EQ(m->kind, MessageKind::kControl) << "message " << i;
    ASSERT_EQ(m->size, static_cast<uint32_t>(i) % (Message::kMaxControl + 1)) << "message " << i;
    for (size_t b = 4; b < m->size; ++b)
      ASSERT_EQ(static_cast<char>(m->data[b]), static_cast<char>('a' + (i + b) % 26));
    if (m->size >= 4) {
      int tag = 0;
      std::memcpy(&tag, m->data.data(), sizeof tag);
      ASSERT_EQ(tag, i);
    }
  }
  sender.join();
  ZW_ASSERT_OK(wait_writes_completed(w->t(1), w->e(1, 0), Deadline::after_seconds(10)));  // src may go now
  for (size_t b = 0; b < 100; ++b) ASSERT_EQ(dst[b], pattern(1, b));
  Message extra;
  auto more = w->e(0, 1).poll(&extra);
  ZW_ASSERT_OK(more);
  EXPECT_FALSE(*more);
}

// The higher rank connects before the lower rank has an endpoint: its connections are parked, then attached.
TEST(TcpTransport, ConnectionsArrivingEarlyAreParkedThenAttached) {
  auto w = make_transports(2, 3);
  ASSERT_TRUE(w);
  auto e1 = w->t(1).connect(0, w->addresses[0]);
  ZW_ASSERT_OK(e1);
  EXPECT_EQ((*e1)->wait_connected(Deadline::after_seconds(0.2)).code(), Code::kTimeout);
  ZW_ASSERT_OK((*e1)->send(bytes_of("early")));  // queued until the pair is up
  auto e0 = w->t(0).connect(1, w->addresses[1]);
  ZW_ASSERT_OK(e0);
  ZW_ASSERT_OK((*e0)->wait_connected(Deadline::after_seconds(10)));
  ZW_ASSERT_OK((*e1)->wait_connected(Deadline::after_seconds(10)));
  auto m = next_message(w->t(0), **e0, Deadline::after_seconds(10));
  ZW_ASSERT_OK(m);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data.data()), m->size), "early");
  w->ep[0][1] = std::move(e0).value();
  w->ep[1][0] = std::move(e1).value();
}

TEST(TcpTransport, WaitForActivityWakesWhenAMessageArrives) {
  auto w = make_world(2, 1);
  ASSERT_TRUE(w);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ZW_ASSERT_OK(w->e(1, 0).send(bytes_of("wake")));
  });
  auto start = std::chrono::steady_clock::now();
  w->t(0).wait_for_activity(std::chrono::seconds(5));
  auto waited = std::chrono::steady_clock::now() - start;
  sender.join();
  EXPECT_LT(waited, std::chrono::seconds(2));
  Message m;
  auto got = w->e(0, 1).poll(&m);
  ZW_ASSERT_OK(got);
  ASSERT_TRUE(*got);
  EXPECT_EQ(m.size, 4u);
}

// Not a test: one stream of 8 MiB writes on loopback, for a rough bandwidth figure. Run with
// --gtest_also_run_disabled_tests --gtest_filter='*Bandwidth*'.
TEST(TcpTransport, DISABLED_StreamBandwidth) {
  for (int64_t sockbuf : {int64_t{-1}, int64_t{0}}) {
    for (int conns : {1, 2, 4}) {
      auto w = make_world(2, conns, sockbuf);
      ASSERT_TRUE(w);
      const size_t bytes = 8u << 20;
      const int iters = 100, depth = 4;
      std::vector<std::byte> src(bytes), dst(bytes * depth);
      fill_pattern(src, 0);
      auto src_mr = std::move(w->t(0).register_memory(MemRef::host(src.data(), src.size()))).value();
      auto dst_mr = std::move(w->t(1).register_memory(MemRef::host(dst.data(), dst.size()))).value();
      auto key = dst_mr->remote_key();
      auto start = std::chrono::steady_clock::now();
      int received = 0;
      for (int i = 0; i < iters; ++i) {
        ZW_ASSERT_OK(w->e(0, 1).write(*src_mr, 0, key, bytes * (i % depth), bytes, i));
        if (i >= depth - 1) {
          ZW_ASSERT_OK(next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(10)));
          ++received;
        }
      }
      while (received < iters) {
        ZW_ASSERT_OK(next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(10)));
        ++received;
      }
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ZW_ASSERT_OK(wait_writes_completed(w->t(0), w->e(0, 1), Deadline::after_seconds(10)));
      for (size_t b = 0; b < bytes; b += 4093) ASSERT_EQ(dst[b], pattern(0, b));
      std::printf("tcp loopback: %d conns, sockbuf %s: %.2f GB/s (%d x 8 MiB, %d in flight)\n", conns,
                  sockbuf < 0 ? "ZW_TCP_SOCKBUF" : "autotuned", iters * double(bytes) / s / 1e9, iters, depth);
    }
  }
}

// Not a test: round trips of 8-byte control messages, for a rough latency figure.
TEST(TcpTransport, DISABLED_PingPongLatency) {
  auto w = make_world(2, 1);
  ASSERT_TRUE(w);
  constexpr int kIters = 5000;
  std::thread echo([&] {
    for (int i = 0; i < kIters; ++i) {
      auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(10));
      ZW_ASSERT_OK(m);
      ZW_ASSERT_OK(w->e(1, 0).send(m->payload()));
    }
  });
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) {
    ZW_ASSERT_OK(w->e(0, 1).send({reinterpret_cast<const std::byte*>(&i), sizeof i}));
    auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(10));
    ZW_ASSERT_OK(m);
    int back = -1;
    std::memcpy(&back, m->data.data(), sizeof back);
    ASSERT_EQ(back, i);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  echo.join();
  std::printf("tcp loopback: control round trip %.1f us (%d round trips)\n", s / kIters * 1e6, kIters);
}

}  // namespace
}  // namespace zw::transport::tcp_test
