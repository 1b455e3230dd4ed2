// verbs transport data path with ranks as threads over the first RDMA device: connecting 2-4 ranks, writes
// verified byte for byte, 64-bit notify values, local argument checks, registration limits and the GID
// choice on the real device. Every test skips when the host has no RDMA device.
#include <cstdlib>
#include <cstring>

#include "tests/transport/verbs/verbs_test_util.h"

namespace zw::transport::verbs_test {
namespace {

class VerbsWorldTest : public ::testing::TestWithParam<int> {};

// Every ordered pair exchanges a control message naming both ranks and one small verified write.
TEST_P(VerbsWorldTest, AllPairsExchangeControlAndWrites) {
  ZW_SKIP_WITHOUT_RDMA();
  const int n = GetParam();
  auto w = make_world(n);
  ASSERT_NE(w, nullptr);
  constexpr size_t kBytes = 4096;
  std::vector<std::vector<std::byte>> src(n), dst(n);
  std::vector<std::unique_ptr<MemoryRegion>> src_mr(n), dst_mr(n);
  for (int r = 0; r < n; ++r) {
    src[r].resize(kBytes);
    fill_pattern(src[r], r);
    dst[r].assign(kBytes * n, std::byte{0});
    auto a = w->t(r).register_memory(MemRef::host(src[r].data(), src[r].size()));
    auto b = w->t(r).register_memory(MemRef::host(dst[r].data(), dst[r].size()));
    ZW_ASSERT_OK(a);
    ZW_ASSERT_OK(b);
    src_mr[r] = std::move(a).value();
    dst_mr[r] = std::move(b).value();
  }
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      ZW_ASSERT_OK(w->e(r, p).send(bytes_of("hello " + std::to_string(r) + "->" + std::to_string(p))));
      ZW_ASSERT_OK(w->e(r, p).write(*src_mr[r], 0, dst_mr[p]->remote_key(), kBytes * r, kBytes, 1000 + r));
    }
  }
  for (int p = 0; p < n; ++p) {
    for (int r = 0; r < n; ++r) {
      if (p == r) continue;
      auto m = next_message(w->t(p), w->e(p, r), Deadline::after_seconds(30));
      ZW_ASSERT_OK(m);
      ASSERT_EQ(m->kind, MessageKind::kControl);
      std::string text(reinterpret_cast<const char*>(m->data.data()), m->size);
      EXPECT_EQ(text, "hello " + std::to_string(r) + "->" + std::to_string(p));
      m = next_message(w->t(p), w->e(p, r), Deadline::after_seconds(30));
      ZW_ASSERT_OK(m);
      ASSERT_EQ(m->kind, MessageKind::kNotify);
      EXPECT_EQ(m->notify, 1000u + r);
      EXPECT_EQ(std::memcmp(dst[p].data() + kBytes * r, src[r].data(), kBytes), 0) << r << "->" << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, VerbsWorldTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(VerbsTransportTest, WritesVerifiedByteForByte) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  constexpr size_t kMax = 8u << 20;
  std::vector<std::byte> src(kMax + 64), dst(kMax + 64);
  fill_pattern(src, 0);
  auto src_mr = w->t(0).register_memory(MemRef::host(src.data(), src.size()));
  auto dst_mr = w->t(1).register_memory(MemRef::host(dst.data(), dst.size()));
  ZW_ASSERT_OK(src_mr);
  ZW_ASSERT_OK(dst_mr);
  uint32_t salt = 1;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4095}, size_t{4096}, size_t{65537},
                       size_t{(1u << 20) + 3}, kMax}) {
    const size_t src_off = bytes % 61, dst_off = bytes % 37;
    std::fill(dst.begin(), dst.end(), std::byte{0xee});  // poison
    ZW_ASSERT_OK(w->e(0, 1).write(**src_mr, src_off, (*dst_mr)->remote_key(), dst_off, bytes, bytes));
    auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(60));
    ZW_ASSERT_OK(m);
    ASSERT_EQ(m->kind, MessageKind::kNotify);
    EXPECT_EQ(m->notify, bytes);
    ASSERT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, bytes), 0) << bytes << " bytes";
    for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], std::byte{0xee}) << "byte before the target, " << bytes;
    for (size_t i = dst_off + bytes; i < dst.size(); ++i)
      ASSERT_EQ(dst[i], std::byte{0xee}) << "byte after the target at " << i << ", " << bytes << " bytes";
    ++salt;
  }
  ZW_ASSERT_OK(wait_writes_completed(w->e(0, 1), Deadline::after_seconds(30)));
  EXPECT_EQ(w->e(0, 1).writes_posted(), 8u);
  EXPECT_EQ(w->e(0, 1).writes_completed(), 8u);
}

TEST(VerbsTransportTest, NotifyCarriesAll64Bits) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  std::vector<std::byte> buf(64);
  auto mr0 = w->t(0).register_memory(MemRef::host(buf.data(), buf.size()));
  std::vector<std::byte> dst(64);
  auto mr1 = w->t(1).register_memory(MemRef::host(dst.data(), dst.size()));
  ZW_ASSERT_OK(mr0);
  ZW_ASSERT_OK(mr1);
  const uint64_t values[] = {0, 1, 0xffffffffull, 0x100000000ull, 0xdeadbeefcafef00dull, ~0ull, 1ull << 63};
  for (uint64_t v : values) ZW_ASSERT_OK(w->e(0, 1).write(**mr0, 0, (*mr1)->remote_key(), 0, 8, v));
  for (uint64_t v : values) {
    auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(30));
    ZW_ASSERT_OK(m);
    ASSERT_EQ(m->kind, MessageKind::kNotify);
    EXPECT_EQ(m->notify, v);
  }
}

TEST(VerbsTransportTest, BadArgumentsRejectedLocally) {
  ZW_SKIP_WITHOUT_RDMA();
  auto w = make_world(2);
  ASSERT_NE(w, nullptr);
  std::vector<std::byte> a(4096), b(4096);
  auto mr0 = w->t(0).register_memory(MemRef::host(a.data(), a.size()));
  auto mr1 = w->t(1).register_memory(MemRef::host(b.data(), b.size()));
  ZW_ASSERT_OK(mr0);
  ZW_ASSERT_OK(mr1);
  Endpoint& e = w->e(0, 1);
  auto key = (*mr1)->remote_key();
  Status st = e.write(**mr0, 0, key, 4000, 97, 1);
  EXPECT_EQ(st.code(), Code::kRemoteAccess) << st.to_string();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  st = e.write(**mr0, 4090, key, 0, 7, 1);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.to_string();
  std::vector<std::byte> junk(24, std::byte{1});
  EXPECT_EQ(e.write(**mr0, 0, junk, 0, 1, 1).code(), Code::kInvalidArgument);
  // A region of another transport (another protection domain) is refused before it reaches the NIC.
  EXPECT_EQ(e.write(**mr1, 0, key, 0, 1, 1).code(), Code::kInvalidArgument);
  std::string big(Message::kMaxControl + 1, 'x');
  EXPECT_EQ(e.send(bytes_of(big)).code(), Code::kInvalidArgument);
  EXPECT_EQ(w->t(0).register_memory(MemRef{a.data(), 16, MemKind::kCudaDevice, 0}).status().code(),
            Code::kUnsupported);
  // None of that touched the connection.
  ZW_ASSERT_OK(e.error());
  std::string max(Message::kMaxControl, 'm');
  ZW_ASSERT_OK(e.send(bytes_of(max)));
  auto m = next_message(w->t(1), w->e(1, 0), Deadline::after_seconds(30));
  ZW_ASSERT_OK(m);
  EXPECT_EQ(m->size, Message::kMaxControl);
  EXPECT_EQ(e.writes_posted(), 0u);
}

TEST(VerbsTransportTest, ConnectChecksAddresses) {
  ZW_SKIP_WITHOUT_RDMA();
  TransportOptions o;
  o.world_size = 3;
  auto t = create_verbs_transport(o);
  ZW_ASSERT_OK(t);
  EXPECT_EQ((*t)->connect(1, "verbs:x").status().code(), Code::kInvalidArgument);  // before listen
  auto address = (*t)->listen();
  ZW_ASSERT_OK(address);
  EXPECT_EQ((*t)->connect(0, *address).status().code(), Code::kInvalidArgument);  // itself
  EXPECT_EQ((*t)->connect(1, *address).status().code(), Code::kInvalidArgument);  // rank 0's address
  EXPECT_EQ((*t)->connect(2, "tcp:host:1").status().code(), Code::kInvalidArgument);
  EXPECT_STREQ((*t)->name(), "verbs");
  EXPECT_TRUE((*t)->caps().one_sided);
}

// The harness exports the IPv4-mapped RoCE v2 GID index it found; the automatic choice must agree.
TEST(VerbsTransportTest, GidAutoSelectionMatchesSoftRoceHarness) {
  ZW_SKIP_WITHOUT_RDMA();
  verbs::VerbsConfig config;
  auto device = verbs::VerbsDevice::open(config);
  ZW_ASSERT_OK(device);
  const char* expected = std::getenv("ZW_SOFTROCE_GID_INDEX");
  if ((*device)->ethernet() && expected != nullptr && *expected != '\0') {
    EXPECT_EQ((*device)->gid_index(), std::atoi(expected)) << (*device)->describe();
  }
  std::cout << "device: " << (*device)->describe() << "\n";
}

}  // namespace
}  // namespace zw::transport::verbs_test
