// Pure-logic tests of the rdma_cm connection setup (verbs_cm_wire.h), runnable without RDMA hardware or
// librdmacm: the private data codec, the job hash, reject reasons, the IP inside a GID, the rdma_cm field of the
// address, and the error a build without librdmacm gives for ZW_IB_USE_RDMA_CM=1.
#include <gtest/gtest.h>

#include <cstring>

#include "transport/verbs/verbs_address.h"
#include "transport/verbs/verbs_cm_wire.h"
#include "transport/verbs/verbs_config.h"

namespace zw::transport::verbs {
namespace {

CmPrivate sample() {
  CmPrivate p;
  p.reply = true;
  p.qp_index = 3;
  p.qps = 4;
  p.from_rank = 7;
  p.to_rank = 65000;
  p.job = 0xdeadbeef;
  p.credit_addr = 0x7f12345678abcdefull;
  p.credit_rkey = 0x80000001u;
  return p;
}

TEST(VerbsCmWireTest, PrivateDataRoundTripsEveryField) {
  const CmPrivate in = sample();
  const auto bytes = encode_cm_private(in);
  static_assert(kCmPrivateBytes <= 56, "an rdma_cm REQ carries at most 56 bytes of private data");
  std::vector<uint8_t> padded(bytes.begin(), bytes.end());
  padded.resize(56, 0);  // the CM pads what it delivers
  auto out = decode_cm_private(padded.data(), padded.size());
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->reply, in.reply);
  EXPECT_EQ(out->qp_index, in.qp_index);
  EXPECT_EQ(out->qps, in.qps);
  EXPECT_EQ(out->from_rank, in.from_rank);
  EXPECT_EQ(out->to_rank, in.to_rank);
  EXPECT_EQ(out->job, in.job);
  EXPECT_EQ(out->credit_addr, in.credit_addr);
  EXPECT_EQ(out->credit_rkey, in.credit_rkey);
  EXPECT_EQ(bytes[0], 'Z');  // big-endian: the magic reads "ZWCM" on the wire
  EXPECT_EQ(bytes[3], 'M');
}

TEST(VerbsCmWireTest, ForeignShortOrOtherVersionDataIsRefusedSayingWhy) {
  auto bytes = encode_cm_private(sample());
  auto shorter = decode_cm_private(bytes.data(), bytes.size() - 1);
  ASSERT_FALSE(shorter.ok());
  EXPECT_EQ(shorter.status().code(), Code::kProtocolError);
  EXPECT_NE(shorter.status().message().find("35 bytes"), std::string::npos) << shorter.status().message();
  EXPECT_FALSE(decode_cm_private(nullptr, 0).ok());
  auto foreign = bytes;
  foreign[0] = 'X';
  auto f = decode_cm_private(foreign.data(), foreign.size());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("not from a zerowire"), std::string::npos) << f.status().message();
  auto newer = bytes;
  newer[4] = kCmVersion + 1;
  auto n = decode_cm_private(newer.data(), newer.size());
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("same zerowire build"), std::string::npos) << n.status().message();
}

TEST(VerbsCmWireTest, JobHashIsFnv1aAndTellsJobsApart) {
  EXPECT_EQ(cm_job_hash(""), 2166136261u);
  EXPECT_EQ(cm_job_hash("a"), 0xe40c292cu);  // FNV-1a test vector
  EXPECT_NE(cm_job_hash("job-1"), cm_job_hash("job-2"));
}

TEST(VerbsCmWireTest, RejectReasonsInWords) {
  EXPECT_NE(cm_reject_reason(8).find("nothing listens"), std::string::npos);
  EXPECT_NE(cm_reject_reason(kCmRejectConsumer).find("consumer defined"), std::string::npos);
  EXPECT_EQ(cm_reject_reason(99), "IB CM reject reason 99");
}

TEST(VerbsCmWireTest, IpOfGid) {
  std::array<uint8_t, 16> gid{};
  EXPECT_EQ(ip_of_gid(gid), "");  // all zero
  gid[10] = gid[11] = 0xff;
  gid[12] = 10, gid[13] = 0, gid[14] = 2, gid[15] = 15;
  EXPECT_EQ(ip_of_gid(gid), "10.0.2.15");
  std::array<uint8_t, 16> v6{0x20, 0x01, 0x0d, 0xb8};
  v6[15] = 1;
  EXPECT_EQ(ip_of_gid(v6), "2001:db8::1");
  std::array<uint8_t, 16> link_local{0xfe, 0x80};
  link_local[15] = 1;
  EXPECT_EQ(ip_of_gid(link_local), "");  // does not route: never an rdma_cm address
}

TEST(VerbsCmWireTest, AddressCarriesTheRdmaCmListener) {
  VerbsAddress a;
  a.rank = 1;
  a.host = "node1";
  a.device = "rxe0:1";
  a.mtu = 3;
  a.qpn = {17, 0};
  a.cm = "10.0.2.15:45678";
  auto parsed = VerbsAddress::parse(a.to_string());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->cm, "10.0.2.15:45678");
  a.cm.clear();
  parsed = VerbsAddress::parse(a.to_string());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->cm, "");
  EXPECT_EQ(a.to_string().find("cm="), std::string::npos);
}

TEST(VerbsCmWireTest, KnobInABuildWithoutLibrdmacmFailsSayingWhatToDo) {
  VerbsConfig config;
  EXPECT_TRUE(check_rdma_cm_support(config, false).ok());  // not asked for: fine either way
  config.use_rdma_cm = true;
  EXPECT_TRUE(check_rdma_cm_support(config, true).ok());
  Status st = check_rdma_cm_support(config, false);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kUnsupported);
  for (const char* part : {"ZW_IB_USE_RDMA_CM=1", "no librdmacm", "install librdmacm-dev", "unset ZW_IB_USE_RDMA_CM"})
    EXPECT_NE(st.message().find(part), std::string::npos) << part << " missing in: " << st.message();
}

}  // namespace
}  // namespace zw::transport::verbs
