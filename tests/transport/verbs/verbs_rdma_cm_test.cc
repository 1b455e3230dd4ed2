// The verbs transport connected through rdma_cm (ZW_IB_USE_RDMA_CM=1), ranks as threads over the first RDMA
// device: every pair exchanges control messages and verified writes (striped over 2 QPs too), and CM failures
// name the peer rank and what to do: a listener that is gone (REJECTED: invalid service ID), a rank of another
// job (REJECTED by the peer, with its reason), an address that does not resolve, and mixing rdma_cm with the
// store path. Skips without an RDMA device, and in builds without librdmacm (the knob then fails, see
// verbs_cm_unit_test.cc).
#include <cstring>
#include <tuple>

#include "tests/transport/verbs/verbs_test_util.h"
#include "transport/verbs/verbs_address.h"
#include "zerowire/config.h"

namespace zw::transport::verbs_test {
namespace {

#define ZW_SKIP_WITHOUT_RDMA_CM()                                                   \
  do {                                                                              \
    ZW_SKIP_WITHOUT_RDMA();                                                         \
    if (!ZW_HAVE_RDMACM) GTEST_SKIP() << "built without librdmacm (librdmacm-dev)"; \
  } while (0)

verbs::VerbsConfig cm_config(bool use_rdma_cm = true, int qps = 1) {
  verbs::VerbsConfig c = verbs::verbs_config();
  c.use_rdma_cm = use_rdma_cm;
  c.qps_per_connection = qps;
  return c;
}

// Two listening transports (ranks 0 and 1 of a world of 2); addresses without the liveness listener, so that
// connect() reaches the CM even when the peer is gone.
struct Pair {
  std::vector<std::unique_ptr<Transport>> t;
  std::vector<std::string> address;
};

Pair listening_pair(const verbs::VerbsConfig& c0, const verbs::VerbsConfig& c1, const std::string& job1 = "cm-test") {
  Pair p;
  for (int r = 0; r < 2; ++r) {
    TransportOptions o;
    o.rank = r;
    o.world_size = 2;
    o.job_id = r == 0 ? "cm-test" : job1;
    auto t = create_verbs_transport(o, r == 0 ? c0 : c1);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return Pair{};
    auto text = (*t)->listen();
    EXPECT_TRUE(text.ok()) << text.status().to_string();
    if (!text.ok()) return Pair{};
    auto parsed = verbs::VerbsAddress::parse(*text);
    EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
    if (!parsed.ok()) return Pair{};
    parsed->live.clear();
    p.address.push_back(parsed->to_string());
    p.t.push_back(std::move(t).value());
  }
  return p;
}

// Rank 0 connects to rank 1 at `address`; the error that connect() or wait_connected() gives.
Status connect_error(Transport& t0, const std::string& address, double seconds) {
  auto e = t0.connect(1, address);
  if (!e.ok()) return e.status();
  Status st = (*e)->wait_connected(Deadline::after_seconds(seconds));
  return st.ok() ? Status(Code::kInternal, "connected, though it should not have") : st;
}

#define EXPECT_HAS(status, part)                              \
  EXPECT_NE((status).message().find(part), std::string::npos) \
      << "'" << (part) << "' missing in: " << (status).to_string()

class VerbsRdmaCmWorldTest : public ::testing::TestWithParam<std::tuple<int, int>> {};  // world size, QPs per peer

// Every ordered pair exchanges a control message and a 256 KiB write (striped when there are 2 QPs), verified.
TEST_P(VerbsRdmaCmWorldTest, AllPairsExchangeControlAndWrites) {
  ZW_SKIP_WITHOUT_RDMA_CM();
  const auto [n, qps] = GetParam();
  auto w = make_world(n, cm_config(true, qps));
  ASSERT_NE(w, nullptr);
  for (const std::string& a : w->addresses) EXPECT_NE(a.find(";cm="), std::string::npos) << a;
  constexpr size_t kBytes = 256 << 10;
  std::vector<std::vector<std::byte>> src(n), dst(n);
  std::vector<std::unique_ptr<MemoryRegion>> src_mr(n), dst_mr(n);
  for (int r = 0; r < n; ++r) {
    src[r].resize(kBytes);
    fill_pattern(src[r], r, 77);
    dst[r].assign(kBytes * n, std::byte{0xee});  // poison
    auto a = w->t(r).register_memory(MemRef::host(src[r].data(), src[r].size()));
    auto b = w->t(r).register_memory(MemRef::host(dst[r].data(), dst[r].size()));
    ZW_ASSERT_OK(a);
    ZW_ASSERT_OK(b);
    src_mr[r] = std::move(a).value();
    dst_mr[r] = std::move(b).value();
  }
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      ZW_ASSERT_OK(w->e(r, p).send(bytes_of("cm " + std::to_string(r) + "->" + std::to_string(p))));
      ZW_ASSERT_OK(w->e(r, p).write(*src_mr[r], 0, dst_mr[p]->remote_key(), kBytes * r, kBytes, 500 + r));
    }
  for (int p = 0; p < n; ++p)
    for (int r = 0; r < n; ++r) {
      if (p == r) continue;
      bool control = false, notify = false;
      for (int i = 0; i < 2; ++i) {  // a striped Notify may overtake the control message (transport.h)
        auto m = next_message(w->t(p), w->e(p, r), Deadline::after_seconds(60));
        ZW_ASSERT_OK(m);
        if (m->kind == MessageKind::kControl) {
          control = true;
          EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data.data()), m->size),
                    "cm " + std::to_string(r) + "->" + std::to_string(p));
        } else {
          notify = true;
          EXPECT_EQ(m->notify, 500u + r);
        }
      }
      EXPECT_TRUE(control && notify) << r << "->" << p;
      EXPECT_EQ(std::memcmp(dst[p].data() + kBytes * r, src[r].data(), kBytes), 0) << r << "->" << p;
    }
}

INSTANTIATE_TEST_SUITE_P(WorldAndQps, VerbsRdmaCmWorldTest,
                         ::testing::Values(std::make_tuple(2, 1), std::make_tuple(3, 2), std::make_tuple(4, 1)),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_qps" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(VerbsRdmaCmTest, ListenerGoneIsRejectedNamingThePeer) {
  ZW_SKIP_WITHOUT_RDMA_CM();
  Pair p = listening_pair(cm_config(), cm_config());
  ASSERT_EQ(p.t.size(), 2u);
  p.t[1].reset();  // its rdma_cm listener goes with it
  Status st = connect_error(*p.t[0], p.address[1], 60);
  EXPECT_EQ(st.code(), Code::kConnectionFailed) << st.to_string();
  EXPECT_HAS(st, "rank 1");
  EXPECT_HAS(st, "RDMA_CM_EVENT_REJECTED");
  EXPECT_HAS(st, "nothing listens");
}

TEST(VerbsRdmaCmTest, RankOfAnotherJobIsRejectedWithThePeersReason) {
  ZW_SKIP_WITHOUT_RDMA_CM();
  Pair p = listening_pair(cm_config(), cm_config(), "another-job");
  ASSERT_EQ(p.t.size(), 2u);
  Status st = connect_error(*p.t[0], p.address[1], 60);
  EXPECT_EQ(st.code(), Code::kConnectionFailed) << st.to_string();
  EXPECT_HAS(st, "rank 1");
  EXPECT_HAS(st, "rejected");
  EXPECT_HAS(st, "another job");  // rank 1's own reason, carried in the REJ private data
}

TEST(VerbsRdmaCmTest, UnresolvableAddressNamesThePeer) {
  ZW_SKIP_WITHOUT_RDMA_CM();
  Pair p = listening_pair(cm_config(), cm_config());
  ASSERT_EQ(p.t.size(), 2u);
  auto a = verbs::VerbsAddress::parse(p.address[1]);
  ZW_ASSERT_OK(a);
  a->cm = "192.0.2.1:" + a->cm.substr(a->cm.rfind(':') + 1);  // TEST-NET-1: no RDMA port has it
  Status st = connect_error(*p.t[0], a->to_string(), 90);
  EXPECT_HAS(st, "rank 1");
  EXPECT_HAS(st, "rdma_cm");
  std::cout << "error: " << st.to_string() << "\n";
}

TEST(VerbsRdmaCmTest, MixingRdmaCmAndTheStorePathNamesTheKnob) {
  ZW_SKIP_WITHOUT_RDMA_CM();
  Pair p = listening_pair(cm_config(true), cm_config(false));
  ASSERT_EQ(p.t.size(), 2u);
  EXPECT_EQ(p.address[1].find(";cm="), std::string::npos) << p.address[1];
  auto e = p.t[0]->connect(1, p.address[1]);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  EXPECT_HAS(e.status(), "rank 1");
  EXPECT_HAS(e.status(), "ZW_IB_USE_RDMA_CM");
  auto back = p.t[1]->connect(0, p.address[0]);
  ASSERT_FALSE(back.ok());
  EXPECT_HAS(back.status(), "ZW_IB_USE_RDMA_CM");
}

}  // namespace
}  // namespace zw::transport::verbs_test
