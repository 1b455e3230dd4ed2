// ZW_IB_QPS_PER_CONNECTION: writes striped over 1 and 4 RC QPs per peer land byte for byte, their Notify comes
// only after every part (the receiver checks the data as soon as it sees the Notify), order is kept, and two
// ranks flooding each other with striped writes and control messages neither deadlock nor lose credits.
// Also the small writes carried inline in one SEND: sizes around kMaxInlineWrite, and a target outside any live
// registration refused by the receiver.
#include <cstring>
#include <thread>

#include "tests/transport/verbs/verbs_test_util.h"
#include "transport/verbs/verbs_endpoint.h"

namespace zw::transport::verbs_test {
namespace {

class VerbsStripingTest : public ::testing::TestWithParam<int> {
 protected:
  verbs::VerbsConfig config() const {
    verbs::VerbsConfig c = verbs::verbs_config();
    c.qps_per_connection = GetParam();
    return c;
  }
};

TEST_P(VerbsStripingTest, WritesLandWholeBeforeTheirNotify) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2, config());
  ASSERT_NE(w, nullptr);
  constexpr size_t kMax = 4u << 20;
  std::vector<std::byte> src(kMax + 64), dst(kMax + 64);
  fill_pattern(src, 0, 7);
  auto src_mr = w->t(0).register_memory(MemRef::host(src.data(), src.size()));
  auto dst_mr = w->t(1).register_memory(MemRef::host(dst.data(), dst.size()));
  ZW_ASSERT_OK(src_mr);
  ZW_ASSERT_OK(dst_mr);
  const size_t sizes[] = {0,
                          1,
                          verbs::kMaxInlineWrite,
                          verbs::kMaxInlineWrite + 1,
                          4096,
                          verbs::kMinStripeBytes - 1,
                          verbs::kMinStripeBytes,
                          verbs::kMinStripeBytes + 1,
                          3 * 4096 + 5,
                          (1u << 20) + 3,
                          kMax};
  for (size_t bytes : sizes) {
    const size_t src_off = bytes % 61, dst_off = bytes % 37;
    std::fill(dst.begin(), dst.end(), std::byte{0xee});  // poison
    ZW_ASSERT_OK(w->e(0, 1).write(**src_mr, src_off, (*dst_mr)->remote_key(), dst_off, bytes, bytes + 1));
    auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(60));
    ZW_ASSERT_OK(m);
    ASSERT_EQ(m->kind, MessageKind::kNotify);
    EXPECT_EQ(m->notify, bytes + 1);
    ASSERT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, bytes), 0) << bytes << " bytes";
    for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], std::byte{0xee}) << "before the target, " << bytes;
    for (size_t i = dst_off + bytes; i < dst.size(); ++i)
      ASSERT_EQ(dst[i], std::byte{0xee}) << "after the target at " << i << ", " << bytes << " bytes";
  }
  ZW_ASSERT_OK(wait_writes_completed(w->e(0, 1), Deadline::after_seconds(60)));
  EXPECT_EQ(w->e(0, 1).writes_posted(), std::size(sizes));
  EXPECT_EQ(w->e(0, 1).writes_completed(), std::size(sizes));
}

// Both ranks post many striped writes (more than a QP's receive window) and control messages at each other
// before polling: credits must keep flowing on every QP, and Notifies arrive in posting order.
TEST_P(VerbsStripingTest, TwoRanksFloodEachOther) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2, config());
  ASSERT_NE(w, nullptr);
  constexpr int kWrites = 100;
  constexpr size_t kBytes = 2 * verbs::kMinStripeBytes + 12345;
  std::vector<std::vector<std::byte>> src(2), dst(2);
  std::vector<std::unique_ptr<MemoryRegion>> src_mr(2), dst_mr(2);
  for (int r = 0; r < 2; ++r) {
    src[r].resize(kBytes);
    fill_pattern(src[r], r, 3);
    dst[r].assign(kBytes * kWrites, std::byte{0});
    auto a = w->t(r).register_memory(MemRef::host(src[r].data(), src[r].size()));
    auto b = w->t(r).register_memory(MemRef::host(dst[r].data(), dst[r].size()));
    ZW_ASSERT_OK(a);
    ZW_ASSERT_OK(b);
    src_mr[r] = std::move(a).value();
    dst_mr[r] = std::move(b).value();
  }
  std::vector<std::thread> threads;
  std::vector<Status> results(2);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const int p = 1 - r;
      Endpoint& e = w->e(r, p);
      int writes_seen = 0, controls_seen = 0;
      auto receive = [&](const Message& m) -> Status {
        if (m.kind == MessageKind::kControl) {
          ++controls_seen;
          return Status();
        }
        if (m.notify != static_cast<uint64_t>(writes_seen))
          return Status(Code::kInternal, "notify " + std::to_string(m.notify) + " out of order, expected " +
                                             std::to_string(writes_seen));
        if (std::memcmp(dst[r].data() + kBytes * writes_seen, src[p].data(), kBytes) != 0)
          return Status(Code::kInternal, "write " + std::to_string(writes_seen) + " incomplete at its notify");
        ++writes_seen;
        return Status();
      };
      for (int i = 0; i < kWrites; ++i) {
        Status st = e.write(*src_mr[r], 0, dst_mr[p]->remote_key(), kBytes * i, kBytes, i);
        if (st.ok()) st = e.send(bytes_of("c"));
        if (!st.ok()) {
          results[r] = st;
          return;
        }
      }
      Deadline deadline = Deadline::after_seconds(120);
      while (writes_seen < kWrites || controls_seen < kWrites) {
        auto m = next_message(w->t(r), e, deadline);
        if (!m.ok()) {
          results[r] = m.status();
          return;
        }
        results[r] = receive(*m);
        if (!results[r].ok()) return;
      }
      results[r] = wait_writes_completed(e, deadline);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(results[0].ok()) << "rank 0: " << results[0].to_string();
  EXPECT_TRUE(results[1].ok()) << "rank 1: " << results[1].to_string();
}

INSTANTIATE_TEST_SUITE_P(QpsPerConnection, VerbsStripingTest, ::testing::Values(1, 4),
                         [](const auto& info) { return "qps" + std::to_string(info.param); });

TEST(VerbsInlineWriteTest, TargetOutsideALiveRegistrationIsRefusedByTheReceiver) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  std::vector<std::byte> src(64), dst(64);
  auto src_mr = w->t(0).register_memory(MemRef::host(src.data(), src.size()));
  ZW_ASSERT_OK(src_mr);
  std::vector<std::byte> key;
  {
    auto gone = w->t(1).register_memory(MemRef::host(dst.data(), dst.size()));
    ZW_ASSERT_OK(gone);
    key = (*gone)->remote_key();
  }  // the cache still holds the registration: a valid inline target
  ZW_ASSERT_OK(w->e(0, 1).write(**src_mr, 0, key, 0, 8, 1));
  auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(60));
  ZW_ASSERT_OK(m);
  EXPECT_EQ(m->notify, 1u);
  // A forged key: right format, an rkey no registration of rank 1 has.
  auto forged = verbs::VerbsRemoteKey::parse(key);
  ZW_ASSERT_OK(forged);
  forged->rkey ^= 0x5a5a5a;
  ZW_ASSERT_OK(w->e(0, 1).write(**src_mr, 0, forged->serialize(), 0, 8, 2));
  auto bad = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(60));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kRemoteAccess) << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("rank 0 wrote 8 bytes"), std::string::npos) << bad.status().to_string();
}

TEST(VerbsStripingTest, MismatchedQpCountsAreRejectedNamingTheKnob) {
  ZW_SKIP_WITHOUT_RDMA();
  verbs::VerbsConfig one = verbs::verbs_config(), four = one;
  one.qps_per_connection = 1;
  four.qps_per_connection = 4;
  std::vector<std::unique_ptr<Transport>> t;
  std::vector<std::string> address;
  for (int r = 0; r < 2; ++r) {
    TransportOptions o;
    o.rank = r;
    o.world_size = 2;
    auto created = create_verbs_transport(o, r == 0 ? one : four);
    ZW_ASSERT_OK(created);
    t.push_back(std::move(created).value());
    auto a = t.back()->listen();
    ZW_ASSERT_OK(a);
    address.push_back(*a);
  }
  auto e = t[0]->connect(1, address[1]);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("ZW_IB_QPS_PER_CONNECTION=4"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace zw::transport::verbs_test
