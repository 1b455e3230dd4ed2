// verbs transport flow control and failures: more messages and writes in flight than the peer has receives
// posted (both ranks flooding each other at once), control-message order, local completion counting, and a
// peer whose QP is gone becoming a sticky error that names it.
#include <atomic>
#include <cstring>
#include <thread>

#include "tests/transport/verbs/verbs_test_util.h"
#include "transport/verbs/verbs_connection.h"

namespace zw::transport::verbs_test {
namespace {

constexpr int kMessages = 5 * verbs::kRecvDepth + 7;  // well past the receive ring

// Runs fn(rank) on one thread per rank and joins them.
template <typename Fn>
void run_ranks(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([r, &fn] { fn(r); });
  for (auto& t : threads) t.join();
}

TEST(VerbsFlowTest, ControlMessagesInOrderBothWays) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  std::atomic<int> failures{0};
  run_ranks(2, [&](int r) {
    const int p = 1 - r;
    int sent = 0, received = 0;
    Deadline deadline = Deadline::after_seconds(120);
    while ((sent < kMessages || received < kMessages) && !deadline.expired()) {
      if (sent < kMessages) {
        std::string text = std::to_string(r) + ":" + std::to_string(sent) + ":" +
                           std::string(static_cast<size_t>(sent) % (Message::kMaxControl - 16), 'c');
        Status st = w->e(r, p).send(bytes_of(text));
        if (!st.ok()) {
          ADD_FAILURE() << st.to_string();
          ++failures;
          return;
        }
        ++sent;
      }
      Message m;
      auto got = w->e(r, p).poll(&m);
      if (!got.ok()) {
        ADD_FAILURE() << got.status().to_string();
        ++failures;
        return;
      }
      if (!*got) continue;
      std::string expected = std::to_string(p) + ":" + std::to_string(received) + ":" +
                             std::string(static_cast<size_t>(received) % (Message::kMaxControl - 16), 'c');
      std::string text(reinterpret_cast<const char*>(m.data.data()), m.size);
      if (m.kind != MessageKind::kControl || text != expected) {
        ADD_FAILURE() << "rank " << r << " message " << received << ": '" << text.substr(0, 20) << "'";
        ++failures;
        return;
      }
      ++received;
    }
    if (received != kMessages) ADD_FAILURE() << "rank " << r << " received " << received << " of " << kMessages;
  });
  EXPECT_EQ(failures.load(), 0);
}

// Both ranks post far more writes than the peer has receives, without polling in between; a writer waiting
// for credits must keep consuming its own inbound or the pair would deadlock.
TEST(VerbsFlowTest, WritesFloodBothWaysBeyondTheReceiveRing) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  constexpr size_t kChunk = 1024;
  std::vector<std::vector<std::byte>> src(2), dst(2);
  std::vector<std::unique_ptr<MemoryRegion>> src_mr(2), dst_mr(2);
  for (int r = 0; r < 2; ++r) {
    src[r].resize(kChunk * kMessages);
    fill_pattern(src[r], r, 77);
    dst[r].assign(kChunk * kMessages, std::byte{0});
    auto a = w->t(r).register_memory(MemRef::host(src[r].data(), src[r].size()));
    auto b = w->t(r).register_memory(MemRef::host(dst[r].data(), dst[r].size()));
    ZW_ASSERT_OK(a);
    ZW_ASSERT_OK(b);
    src_mr[r] = std::move(a).value();
    dst_mr[r] = std::move(b).value();
  }
  run_ranks(2, [&](int r) {
    const int p = 1 - r;
    auto key = dst_mr[p]->remote_key();
    for (int i = 0; i < kMessages; ++i) {
      uint64_t notify = (static_cast<uint64_t>(r) << 40) | static_cast<uint64_t>(i);
      Status st = w->e(r, p).write(*src_mr[r], kChunk * i, key, kChunk * i, kChunk, notify);
      if (!st.ok()) return ADD_FAILURE() << st.to_string();
    }
    for (int i = 0; i < kMessages; ++i) {
      auto m = next_message(w->t(r), w->e(r, p), Deadline::after_seconds(120));
      if (!m.ok()) return ADD_FAILURE() << "rank " << r << " write " << i << ": " << m.status().to_string();
      uint64_t expected = (static_cast<uint64_t>(p) << 40) | static_cast<uint64_t>(i);
      if (m->kind != MessageKind::kNotify || m->notify != expected)
        return ADD_FAILURE() << "rank " << r << " notify " << i << " was " << m->notify;
    }
    Status st = wait_writes_completed(w->e(r, p), Deadline::after_seconds(60));
    if (!st.ok()) ADD_FAILURE() << st.to_string();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(std::memcmp(dst[r].data(), src[1 - r].data(), dst[r].size()), 0) << "data at rank " << r;
    EXPECT_EQ(w->e(r, 1 - r).writes_completed(), static_cast<uint64_t>(kMessages));
  }
}

// Rank 1's endpoint goes away (its QP enters the error state); rank 0's next message is never acknowledged
// and the failure is sticky, names rank 1, and makes peer_known_dead() true.
TEST(VerbsFlowTest, VanishedPeerIsStickyErrorNamingIt) {
  ZW_SKIP_WITHOUT_RDMA();
  verbs::VerbsConfig config = verbs::verbs_config();
  config.timeout = 10;   // 4 ms per try
  config.retry_cnt = 1;  // fail fast
  auto w = make_world(2, config);
  ASSERT_NE(w, nullptr);
  ZW_ASSERT_OK(w->e(1, 0).send(bytes_of("unsignaled, so only the drain marker tells that it is done")));
  auto start = Clock::now();
  w->ep[1][0].reset();
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(500)) << "endpoint teardown waits for its flush";
  std::string why;
  EXPECT_FALSE(w->t(0).peer_known_dead(1, &why));
  ZW_ASSERT_OK(w->e(0, 1).send(bytes_of("anyone there?")));
  Message m;
  Status st;
  Deadline deadline = Deadline::after_seconds(60);
  while (st.ok() && !deadline.expired()) {
    auto got = w->e(0, 1).poll(&m);
    if (!got.ok()) st = got.status();
    w->t(0).wait_for_activity(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(st.ok()) << "no error within 60 s";
  EXPECT_EQ(st.code(), Code::kConnectionLost) << st.to_string();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  EXPECT_EQ(w->e(0, 1).send(bytes_of("again")).code(), st.code()) << "the error is sticky";
  EXPECT_TRUE(w->t(0).peer_known_dead(1, &why));
  EXPECT_NE(why.find("rank 1"), std::string::npos) << why;
}

// A rank sleeping in wait_for_activity() is woken by the completion channel when a message arrives.
TEST(VerbsFlowTest, WaitForActivityWakesOnArrival) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Status st = w->e(0, 1).send(bytes_of("wake up"));
    if (!st.ok()) ADD_FAILURE() << st.to_string();
  });
  auto start = Clock::now();
  Message m;
  bool got = false;
  while (!got && Clock::now() - start < std::chrono::seconds(20)) {
    w->t(1).wait_for_activity(std::chrono::seconds(5));
    auto r = w->e(1, 0).poll(&m);
    ZW_ASSERT_OK(r);
    got = *r;
  }
  sender.join();
  ASSERT_TRUE(got);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3)) << "woken by the 5 s timeout, not by the arrival";
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data.data()), m.size), "wake up");
}

}  // namespace
}  // namespace zw::transport::verbs_test
