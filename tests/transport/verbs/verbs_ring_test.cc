// The verbs eager ring (verbs_connection.h): messages read from the receiver's memory, in order, across many ring
// wrap-arounds with small (inline) writes, large writes and control messages mixed; a sender that fills the whole
// ring before the receiver polls (credits); and a receiver asleep in wait_for_activity() being woken after a busy
// phase in which its peer sent plain WRITEs (the sleep handshake), also with sends racing the handshake.
// Non-goals: speed (never asserted), pure-logic checks (verbs_unit_test.cc).
#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "tests/transport/verbs/verbs_test_util.h"
#include "transport/verbs/verbs_connection.h"

namespace zw::transport::verbs_test {
namespace {

void expect_ok(const Status& st) { EXPECT_TRUE(st.ok()) << st.to_string(); }

constexpr int kMixed = 3 * verbs::kRecvDepth + 17;  // several wrap-arounds of the ring
constexpr size_t kLarge = 64 * 1024;                // the largest write of the mixed test

// What message i of the mixed stream is: 0 control, 1 small write, 2 large write.
int kind_of(int i) { return (i * 7 + i / 5) % 3; }
size_t small_size(int i) { return 1 + static_cast<size_t>(i * 37) % verbs::kMaxInlineWrite; }
size_t large_size(int i) { return verbs::kMaxInlineWrite + 1 + static_cast<size_t>(i * 4099) % (kLarge - 300); }

// Rank 0 sends a stream of control messages, small and large writes (each write into its own range of rank 1's
// buffer); rank 1 checks that every message arrives in posting order and that every write's bytes are in place
// when its Notify arrives.
TEST(VerbsRingTest, MixedMessagesKeepOrderAcrossWrapArounds) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  const size_t stride = kLarge;
  std::vector<std::byte> src(stride * kMixed), dst(stride * kMixed, std::byte{0});
  fill_pattern(src, 0, 5);
  auto src_mr = w->t(0).register_memory(MemRef::host(src.data(), src.size()));
  auto dst_mr = w->t(1).register_memory(MemRef::host(dst.data(), dst.size()));
  ZW_ASSERT_OK(src_mr);
  ZW_ASSERT_OK(dst_mr);
  const auto key = (*dst_mr)->remote_key();
  std::thread sender([&] {
    for (int i = 0; i < kMixed; ++i) {
      Status st;
      const size_t at = stride * static_cast<size_t>(i);
      if (kind_of(i) == 0) {
        std::string text = "control " + std::to_string(i);
        st = w->e(0, 1).send(bytes_of(text));
      } else {
        const size_t n = kind_of(i) == 1 ? small_size(i) : large_size(i);
        st = w->e(0, 1).write(**src_mr, at, key, at, n, static_cast<uint64_t>(i));
      }
      if (!st.ok()) return ADD_FAILURE() << "message " << i << ": " << st.to_string();
    }
    Status st = wait_writes_completed(w->e(0, 1), Deadline::after_seconds(60));
    if (!st.ok()) ADD_FAILURE() << st.to_string();
  });
  for (int i = 0; i < kMixed; ++i) {
    auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(120));
    ASSERT_TRUE(m.ok()) << "message " << i << ": " << m.status().to_string();
    if (kind_of(i) == 0) {
      ASSERT_EQ(m->kind, MessageKind::kControl) << "message " << i;
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(m->data.data()), m->size), "control " + std::to_string(i));
      continue;
    }
    ASSERT_EQ(m->kind, MessageKind::kNotify) << "message " << i;
    ASSERT_EQ(m->notify, static_cast<uint64_t>(i)) << "message " << i;
    const size_t at = stride * static_cast<size_t>(i);
    const size_t n = kind_of(i) == 1 ? small_size(i) : large_size(i);
    ASSERT_EQ(std::memcmp(dst.data() + at, src.data() + at, n), 0) << "bytes of write " << i << " (" << n << " B)";
    ASSERT_EQ(dst[at + n], std::byte{0}) << "write " << i << " wrote past its end";
  }
  sender.join();
}

// The sender posts a full ring's worth of small writes and more while the receiver does not poll: it must wait
// for credits (never overwrite a slot the receiver has not consumed), and every write arrives once it polls.
TEST(VerbsRingTest, SenderWaitsForCreditsWhenTheRingIsFull) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  constexpr int kWrites = 2 * verbs::kRecvDepth + 3;
  std::vector<uint64_t> src(kWrites), dst(kWrites, 0);
  for (int i = 0; i < kWrites; ++i) src[i] = 0x1234567800000000ull + static_cast<uint64_t>(i);
  auto src_mr = w->t(0).register_memory(MemRef::host(src.data(), src.size() * 8));
  auto dst_mr = w->t(1).register_memory(MemRef::host(dst.data(), dst.size() * 8));
  ZW_ASSERT_OK(src_mr);
  ZW_ASSERT_OK(dst_mr);
  const auto key = (*dst_mr)->remote_key();
  std::atomic<int> posted{0};
  std::thread sender([&] {
    for (int i = 0; i < kWrites; ++i) {
      Status st = w->e(0, 1).write(**src_mr, 8 * i, key, 8 * i, 8, static_cast<uint64_t>(i));
      if (!st.ok()) return ADD_FAILURE() << "write " << i << ": " << st.to_string();
      posted.store(i + 1);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LE(posted.load(), verbs::kRecvDepth + 1) << "the sender went past the receiver's ring without credits";
  for (int i = 0; i < kWrites; ++i) {
    auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(60));
    ASSERT_TRUE(m.ok()) << "write " << i << ": " << m.status().to_string();
    ASSERT_EQ(m->notify, static_cast<uint64_t>(i));
    ASSERT_EQ(dst[i], src[i]) << "write " << i;
  }
  sender.join();
  EXPECT_EQ(posted.load(), kWrites);
}

// Polls `e` (never sleeping) until a message arrives.
Result<Message> spin_message(Endpoint& e) { return test_util::poll_message(e, Deadline::after_seconds(30), nullptr); }

// One round of the sleep tests: a busy ping-pong (polling only, long enough for rank 1 to clear its sleep flag,
// so that rank 0 sends plain WRITEs), then rank 0 sends one more message after `delay` while rank 1 waits for it
// only in wait_for_activity(timeout). Returns false when a wait ran into its timeout although a message was on
// its way (a lost wake-up).
bool sleep_round(World& w, std::chrono::microseconds delay, std::chrono::seconds timeout, int round) {
  for (int i = 0; i < 12; ++i) {
    expect_ok(w.e(1, 0).send(bytes_of("ping")));
    auto ping = spin_message(w.e(0, 1));
    EXPECT_TRUE(ping.ok()) << ping.status().to_string();
    expect_ok(w.e(0, 1).send(bytes_of("pong")));
    auto pong = spin_message(w.e(1, 0));
    EXPECT_TRUE(pong.ok()) << pong.status().to_string();
    if (!ping.ok() || !pong.ok()) return true;
  }
  std::thread late([&] {
    std::this_thread::sleep_for(delay);
    expect_ok(w.e(0, 1).send(bytes_of("late " + std::to_string(round))));
  });
  bool woken = true;
  Message m;
  for (;;) {
    auto got = w.e(1, 0).poll(&m);
    EXPECT_TRUE(got.ok()) << got.status().to_string();
    if (!got.ok() || *got) break;
    auto start = Clock::now();
    w.t(1).wait_for_activity(timeout);
    if (Clock::now() - start >= timeout) woken = false;
  }
  late.join();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data.data()), m.size), "late " + std::to_string(round));
  return woken;
}

// After a busy exchange (plain WRITEs), a receiver that goes to sleep is still woken by the next message.
TEST(VerbsRingTest, SleepingReceiverWokenAfterBusyPhase) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  for (int round = 0; round < 3; ++round)
    EXPECT_TRUE(sleep_round(*w, std::chrono::milliseconds(200), std::chrono::seconds(10), round))
        << "round " << round << ": woken by the timeout, not by the message";
}

// The late message races the receiver's sleep handshake (delays from 0 to 2 ms): no wake-up may be lost.
TEST(VerbsRingTest, NoLostWakeUpWhenSendsRaceTheSleepHandshake) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  std::mt19937 rng(7);
  int lost = 0;
  for (int round = 0; round < 150; ++round) {
    auto delay = std::chrono::microseconds(rng() % 2000);
    if (!sleep_round(*w, delay, std::chrono::seconds(3), round)) ++lost;
  }
  EXPECT_EQ(lost, 0) << "rounds in which only wait_for_activity's timeout saw the message";
}

// Small writes that repeat the previous one's target go without it (kSameTarget): runs of them into one
// address, other sizes and offsets, another region, and back, each lands in place. The first ring's worth goes
// in lock step (rank 1 checks the bytes and acknowledges each), the rest back to back (several in flight).
TEST(VerbsRingTest, SmallWritesToTheSameTargetLandInPlace) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  constexpr int kWrites = 2 * verbs::kRecvDepth + 9;
  constexpr int kLockStep = verbs::kRecvDepth + 3;
  std::vector<std::byte> src(kWrites * 64);
  fill_pattern(src, 0, 9);
  std::vector<std::byte> a(256, std::byte{0}), b(256, std::byte{0});
  auto src_mr = w->t(0).register_memory(MemRef::host(src.data(), src.size()));
  auto a_mr = w->t(1).register_memory(MemRef::host(a.data(), a.size()));
  auto b_mr = w->t(1).register_memory(MemRef::host(b.data(), b.size()));
  ZW_ASSERT_OK(src_mr);
  ZW_ASSERT_OK(a_mr);
  ZW_ASSERT_OK(b_mr);
  // Write i: region (a or b), offset and size; runs of equal targets between the changes.
  auto in_b = [](int i) { return (i / 11) % 3 == 2; };
  auto offset = [](int i) { return static_cast<size_t>((i / 5) % 4) * 8; };
  auto size = [](int i) { return i % 7 == 6 ? size_t{3} : size_t{8}; };
  std::thread sender([&] {
    for (int i = 0; i < kWrites; ++i) {
      const auto key = in_b(i) ? (*b_mr)->remote_key() : (*a_mr)->remote_key();
      Status st =
          w->e(0, 1).write(**src_mr, static_cast<size_t>(i) * 64, key, offset(i), size(i), static_cast<uint64_t>(i));
      if (!st.ok()) return ADD_FAILURE() << "write " << i << ": " << st.to_string();
      if (i >= kLockStep) continue;
      auto ack = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(60));
      if (!ack.ok()) return ADD_FAILURE() << "ack " << i << ": " << ack.status().to_string();
    }
    Status st = wait_writes_completed(w->e(0, 1), Deadline::after_seconds(60));
    if (!st.ok()) ADD_FAILURE() << st.to_string();
  });
  for (int i = 0; i < kWrites; ++i) {
    auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(60));
    ASSERT_TRUE(m.ok()) << "write " << i << ": " << m.status().to_string();
    ASSERT_EQ(m->kind, MessageKind::kNotify) << "write " << i;
    ASSERT_EQ(m->notify, static_cast<uint64_t>(i));
    const std::vector<std::byte>& dst = in_b(i) ? b : a;
    // Past the lock step, later writes may have landed over this one: compare only the last one to its target.
    bool last = true;
    for (int j = i + 1; j < kWrites && last && i >= kLockStep; ++j) last = in_b(j) != in_b(i) || offset(j) != offset(i);
    if (last) {
      ASSERT_EQ(std::memcmp(dst.data() + offset(i), src.data() + static_cast<size_t>(i) * 64, size(i)), 0)
          << "write " << i;
    }
    if (i < kLockStep) ZW_ASSERT_OK(w->e(1, 0).send(bytes_of(std::string("ack"))));
  }
  sender.join();
}

}  // namespace
}  // namespace zw::transport::verbs_test
