// Data-path tests of the shm transport with ranks as threads of one process: writes with notify, control
// messages, ring overflow with concurrent and mutual senders, exact bytes from 1 B to 8 MiB, argument
// checks, the activity wait and the send timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/knobs.h"
#include "shm_test_util.h"
#include "transport/shm/shm_queue.h"

namespace zw::transport::shm_test {
namespace {

// A short ZW_TIMEOUT for this whole binary, so that the timeout test, and a deadlock bug, fail within
// seconds. Runs before main(); knobs() is parsed lazily on first use.
const bool kShortTimeout = (::setenv("ZW_TIMEOUT", "2", /*overwrite=*/1), true);

std::vector<std::byte> seq_payload(uint64_t i) {
  std::vector<std::byte> out(8);
  std::memcpy(out.data(), &i, 8);
  return out;
}

uint64_t seq_of(const Message& m) {
  uint64_t i = 0;
  std::memcpy(&i, m.data.data(), 8);
  return i;
}

TEST(ShmTransport, CapsDescribeAHostOnlyCopyingBackend) {
  auto t = create_transport("shm", TransportOptions{0, 2, random_job_id(), ""});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_STREQ(t.value()->name(), "shm");
  const Caps& caps = t.value()->caps();
  EXPECT_GE(caps.max_write_bytes, size_t{1} << 40);
  EXPECT_EQ(caps.max_control_bytes, Message::kMaxControl);
  EXPECT_FALSE(caps.one_sided);
  EXPECT_TRUE(caps.host_memory);
  EXPECT_FALSE(caps.device_memory);
  EXPECT_TRUE(caps.any_memory_remote);
}

TEST(ShmTransport, RejectsRankOutsideWorld) {
  auto t = create_shm_transport(TransportOptions{3, 3, random_job_id(), ""});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("rank 3"), std::string::npos) << t.status().message();
}

class ShmWorld : public ::testing::TestWithParam<int> {};

TEST_P(ShmWorld, WriteWithNotifyLandsInEveryPeer) {
  const int n = GetParam();
  const size_t block = 4099;  // odd, so blocks are unaligned
  World w;
  ASSERT_NO_FATAL_FAILURE(make_world(n, &w));
  std::vector<std::vector<std::byte>> dst(n, std::vector<std::byte>(n * block, std::byte{0xEE}));
  std::vector<std::vector<std::byte>> src(n, std::vector<std::byte>(block));
  std::vector<std::unique_ptr<MemoryRegion>> dst_mr, src_mr;
  for (int r = 0; r < n; ++r) {
    fill_pattern(src[r].data(), block, 100 + r);
    auto d = w.transports[r]->register_memory(MemRef::host(dst[r].data(), dst[r].size()));
    auto s = w.transports[r]->register_memory(MemRef::host(src[r].data(), src[r].size()));
    ASSERT_TRUE(d.ok() && s.ok());
    dst_mr.push_back(std::move(d).value());
    src_mr.push_back(std::move(s).value());
  }
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      Endpoint& ep = w.ep(r, p);
      Status s = ep.write(*src_mr[r], 0, dst_mr[p]->remote_key(), r * block, block, 1000 * r + p);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(ep.writes_completed(), ep.writes_posted());
    }
  for (int me = 0; me < n; ++me) {
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        EXPECT_EQ(dst[me][me * block], std::byte{0xEE}) << "own block of rank " << me << " was overwritten";
        continue;
      }
      Message m;
      auto got = w.ep(me, p).poll(&m);
      ASSERT_TRUE(got.ok() && got.value()) << "rank " << me << " got no notify from " << p;
      EXPECT_EQ(m.kind, MessageKind::kNotify);
      EXPECT_EQ(m.notify, static_cast<uint64_t>(1000 * p + me));
      EXPECT_EQ(first_mismatch(dst[me].data() + p * block, block, 100 + p), block)
          << "block " << p << " of rank " << me;
      got = w.ep(me, p).poll(&m);
      ASSERT_TRUE(got.ok());
      EXPECT_FALSE(got.value()) << "a second message appeared";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmWorld, ::testing::Values(2, 3, 4));

TEST(ShmTransport, ControlMessagesAndNotifiesArriveInOrder) {
  World w;
  ASSERT_NO_FATAL_FAILURE(make_world(2, &w));
  std::vector<std::byte> buf(64);
  auto mr = w.transports[1]->register_memory(MemRef::host(buf.data(), buf.size()));
  ASSERT_TRUE(mr.ok());
  const int count = 200;  // fewer than the ring holds: nobody polls until the end
  for (int i = 0; i < count; ++i) {
    if (i % 10 == 0) {
      ASSERT_TRUE(w.ep(0, 1).write(*mr.value(), 0, mr.value()->remote_key(), 8, 8, i).ok());
      continue;
    }
    std::vector<std::byte> payload(i % (Message::kMaxControl + 1));
    fill_pattern(payload.data(), payload.size(), i);
    ASSERT_TRUE(w.ep(0, 1).send(payload).ok());
  }
  for (int i = 0; i < count; ++i) {
    Message m;
    auto got = w.ep(1, 0).poll(&m);
    ASSERT_TRUE(got.ok() && got.value()) << "message " << i << " missing";
    if (i % 10 == 0) {
      EXPECT_EQ(m.kind, MessageKind::kNotify) << i;
      EXPECT_EQ(m.notify, static_cast<uint64_t>(i));
      continue;
    }
    ASSERT_EQ(m.kind, MessageKind::kControl) << i;
    ASSERT_EQ(m.size, static_cast<uint32_t>(i % (Message::kMaxControl + 1)));
    EXPECT_EQ(first_mismatch(m.data.data(), m.size, i), m.size) << "payload of message " << i;
  }
}

TEST(ShmTransport, ManyMoreMessagesThanTheRingWithAConcurrentConsumer) {
  World w;
  ASSERT_NO_FATAL_FAILURE(make_world(2, &w));
  const uint64_t count = uint64_t{10} * kRingSlots + 7;
  std::vector<uint64_t> received;
  std::thread consumer([&] {
    Deadline deadline = Deadline::after_seconds(15);
    Message m;
    while (received.size() < count && !deadline.expired()) {
      auto got = w.ep(1, 0).poll(&m);
      if (!got.ok()) return;
      if (got.value())
        received.push_back(seq_of(m));
      else
        w.transports[1]->wait_for_activity(std::chrono::milliseconds(50));
    }
  });
  Status sent;
  for (uint64_t i = 0; i < count && sent.ok(); ++i) sent = w.ep(0, 1).send(seq_payload(i));
  consumer.join();
  ASSERT_TRUE(sent.ok()) << sent.to_string();
  ASSERT_EQ(received.size(), count);
  for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(received[i], i) << "out of order at " << i;
}

TEST(ShmTransport, MutualFloodBeyondTheRingDoesNotDeadlock) {
  World w;
  ASSERT_NO_FATAL_FAILURE(make_world(2, &w));
  const uint64_t count = uint64_t{3} * kRingSlots;  // both sides send before either polls
  std::vector<Status> sent(2);
  std::vector<std::vector<uint64_t>> received(2);
  auto rank_main = [&](int me) {
    for (uint64_t i = 0; i < count && sent[me].ok(); ++i) sent[me] = w.ep(me, 1 - me).send(seq_payload(i));
    Message m;
    Deadline deadline = Deadline::after_seconds(10);
    while (received[me].size() < count && !deadline.expired()) {
      auto got = w.ep(me, 1 - me).poll(&m);
      if (!got.ok()) return;
      if (got.value())
        received[me].push_back(seq_of(m));
      else
        w.transports[me]->wait_for_activity(std::chrono::milliseconds(20));
    }
  };
  std::thread other(rank_main, 1);
  rank_main(0);
  other.join();
  for (int me = 0; me < 2; ++me) {
    ASSERT_TRUE(sent[me].ok()) << "rank " << me << ": " << sent[me].to_string();
    ASSERT_EQ(received[me].size(), count) << "rank " << me;
    for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(received[me][i], i) << "rank " << me << " at " << i;
  }
}

TEST(ShmTransport, WritesFromOneByteToEightMiBAreExact) {
  World w;
  ASSERT_NO_FATAL_FAILURE(make_world(2, &w));
  const size_t max = 8u << 20, guard = 64;
  std::vector<std::byte> src(max + 3), dst(max + 2 * guard);
  auto src_mr = w.transports[0]->register_memory(MemRef::host(src.data(), src.size()));
  auto dst_mr = w.transports[1]->register_memory(MemRef::host(dst.data(), dst.size()));
  ASSERT_TRUE(src_mr.ok() && dst_mr.ok());
  uint64_t seed = 1;
  for (size_t bytes : {size_t{1}, size_t{3}, size_t{4095}, size_t{4096}, size_t{65537}, (size_t{1} << 20) + 5, max}) {
    ++seed;
    std::fill(dst.begin(), dst.end(), std::byte{0x5A});
    fill_pattern(src.data() + 3, bytes, seed);
    Status s = w.ep(0, 1).write(*src_mr.value(), 3, dst_mr.value()->remote_key(), guard, bytes, bytes);
    ASSERT_TRUE(s.ok()) << bytes << ": " << s.to_string();
    Message m;
    auto got = w.ep(1, 0).poll(&m);
    ASSERT_TRUE(got.ok() && got.value());
    EXPECT_EQ(m.notify, bytes);
    EXPECT_EQ(first_mismatch(dst.data() + guard, bytes, seed), bytes) << "write of " << bytes << " bytes";
    for (size_t i = 0; i < guard; ++i) {
      ASSERT_EQ(dst[i], std::byte{0x5A}) << "byte before the target, write of " << bytes;
      ASSERT_EQ(dst[guard + bytes + i], std::byte{0x5A}) << "byte after the target, write of " << bytes;
    }
  }
  EXPECT_EQ(w.ep(0, 1).writes_posted(), 7u);
  EXPECT_EQ(w.ep(0, 1).writes_completed(), 7u);
}

TEST(ShmTransport, OutOfBoundsWritesAreRejectedWithTheNumbers) {
  World w;
  ASSERT_NO_FATAL_FAILURE(make_world(2, &w));
  std::vector<std::byte> local(100), remote(64);
  auto l = w.transports[0]->register_memory(MemRef::host(local.data(), local.size()));
  auto r = w.transports[1]->register_memory(MemRef::host(remote.data(), remote.size()));
  ASSERT_TRUE(l.ok() && r.ok());
  Endpoint& ep = w.ep(0, 1);
  auto key = r.value()->remote_key();

  Status s = ep.write(*l.value(), 90, key, 0, 20, 1);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("local offset 90 + 20 bytes exceeds the local region of 100 bytes"), std::string::npos)
      << s.message();
  s = ep.write(*l.value(), 0, key, 60, 8, 1);
  EXPECT_EQ(s.code(), Code::kRemoteAccess);
  EXPECT_NE(s.message().find("remote offset 60 + 8 bytes exceeds the remote region of 64 bytes"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  s = ep.write(*l.value(), 0, key, SIZE_MAX, 2, 1);  // offset + bytes overflows
  EXPECT_EQ(s.code(), Code::kRemoteAccess);
  s = ep.write(*l.value(), 0, std::vector<std::byte>(5), 0, 1, 1);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not an shm transport key"), std::string::npos) << s.message();
  EXPECT_EQ(ep.writes_posted(), 0u);

  // Rejected arguments leave the endpoint usable and deliver nothing.
  EXPECT_TRUE(ep.error().ok());
  local[0] = std::byte{42};
  ASSERT_TRUE(ep.write(*l.value(), 0, key, 63, 1, 9).ok());
  Message m;
  auto got = w.ep(1, 0).poll(&m);
  ASSERT_TRUE(got.ok() && got.value());
  EXPECT_EQ(m.notify, 9u);
  EXPECT_EQ(remote[63], std::byte{42});  // in place once the notify is seen (small writes travel in the ring)
  got = w.ep(1, 0).poll(&m);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got.value());
}

TEST(ShmTransport, OversizedControlMessageIsRejected) {
  World w;
  ASSERT_NO_FATAL_FAILURE(make_world(2, &w));
  std::vector<std::byte> big(Message::kMaxControl + 1, std::byte{1});
  Status s = w.ep(0, 1).send(big);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("has 241 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("at most 240"), std::string::npos) << s.message();
  big.pop_back();
  ASSERT_TRUE(w.ep(0, 1).send(big).ok());
  Message m;
  auto got = w.ep(1, 0).poll(&m);
  ASSERT_TRUE(got.ok() && got.value());
  EXPECT_EQ(m.size, Message::kMaxControl);
}

TEST(ShmTransport, WaitForActivityWakesOnArrivalAndTimesOut) {
  World w;
  ASSERT_NO_FATAL_FAILURE(make_world(2, &w));
  uint64_t start = now_ns();
  w.transports[1]->wait_for_activity(std::chrono::milliseconds(30));
  double idle_ms = (now_ns() - start) / 1e6;
  EXPECT_GE(idle_ms, 29.0);
  EXPECT_LT(idle_ms, 1000.0);

  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(w.ep(0, 1).send(bytes_of("wake")).ok());
  });
  start = now_ns();
  w.transports[1]->wait_for_activity(std::chrono::seconds(5));  // sleeps on the futex after the spin
  double woke_ms = (now_ns() - start) / 1e6;
  sender.join();
  EXPECT_GE(woke_ms, 50.0);
  EXPECT_LT(woke_ms, 2000.0) << "the doorbell did not wake the sleeping rank";
  Message m;
  auto got = w.ep(1, 0).poll(&m);
  ASSERT_TRUE(got.ok() && got.value());
  EXPECT_EQ(text_of(m.payload()), "wake");
}

TEST(ShmTransport, SendToAPeerThatNeverPollsTimesOutNamingIt) {
  ASSERT_EQ(knobs().timeout_s, 2.0) << "this test expects the short ZW_TIMEOUT set above";
  World w;
  ASSERT_NO_FATAL_FAILURE(make_world(2, &w));
  for (uint32_t i = 0; i < kRingSlots; ++i) ASSERT_TRUE(w.ep(0, 1).send(seq_payload(i)).ok()) << i;
  uint64_t start = now_ns();
  Status s = w.ep(0, 1).send(seq_payload(kRingSlots));
  double waited_s = (now_ns() - start) / 1e9;
  EXPECT_EQ(s.code(), Code::kTimeout) << s.to_string();
  EXPECT_NE(s.message().find("rank 1 (pid " + std::to_string(::getpid())), std::string::npos) << s.message();
  EXPECT_GE(waited_s, knobs().timeout_s * 0.9);
  // The error is sticky.
  EXPECT_EQ(w.ep(0, 1).error().code(), Code::kTimeout);
  EXPECT_EQ(w.ep(0, 1).send(seq_payload(0)).code(), Code::kTimeout);
  Message m;
  EXPECT_EQ(status_of(w.ep(0, 1).poll(&m)).code(), Code::kTimeout);
  // The other direction is unaffected.
  auto got = w.ep(1, 0).poll(&m);
  ASSERT_TRUE(got.ok() && got.value());
  EXPECT_EQ(seq_of(m), 0u);
}

}  // namespace
}  // namespace zw::transport::shm_test
