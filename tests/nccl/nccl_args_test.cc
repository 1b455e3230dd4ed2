// libzwnccl's argument checking through NCCL's C API: every misuse returns NCCL's code (never success, never a
// crash) and ncclGetLastError says what was wrong. Also: ncclConfig_t read by its size/magic/version prefix, the
// version, error strings, and calls NCCL defines but zerowire does not implement (named in the error).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"
#include "nccl/nccl_test_util.h"

namespace zw::nccl_test {
namespace {

std::string last() { return ncclGetLastError(nullptr); }

TEST(NcclArgs, VersionAndStrings) {
  int v = 0;
  EXPECT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, 22809);
  EXPECT_EQ(NCCL_VERSION_CODE, NCCL_VERSION(2, 28, 9));
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  for (int r = 0; r <= ncclNumResults; ++r) EXPECT_NE(ncclGetErrorString(static_cast<ncclResult_t>(r)), nullptr);
  EXPECT_EQ(sizeof(ncclUniqueId), 128u);
  // The config layout of NCCL 2.28 (fields at NCCL's offsets: programs built against either header interoperate).
  EXPECT_EQ(offsetof(ncclConfig_t, blocking), 16u);
  EXPECT_EQ(offsetof(ncclConfig_t, netName), 32u);
  EXPECT_EQ(offsetof(ncclConfig_t, commName), 48u);
  EXPECT_EQ(sizeof(ncclConfig_t), 80u);
}

TEST(NcclArgs, NullCommunicator) {
  float x = 0;
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(last().find("comm is NULL"), std::string::npos) << last();
  EXPECT_EQ(ncclAllGather(&x, &x, 1, ncclFloat, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(&x, 1, ncclFloat, 0, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclRecv(&x, 1, ncclFloat, 0, nullptr, nullptr), ncclInvalidArgument);
  int n = 0;
  EXPECT_EQ(ncclCommCount(nullptr, &n), ncclInvalidArgument);
  EXPECT_EQ(ncclCommUserRank(nullptr, &n), ncclInvalidArgument);
  ncclResult_t async;
  EXPECT_EQ(ncclCommGetAsyncError(nullptr, &async), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, ncclUniqueId{}, 0), ncclInvalidArgument);
}

TEST(NcclArgs, BadRankOrId) {
  ncclComm_t comm = nullptr;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  ncclUniqueId garbage;
  std::memset(&garbage, 'x', sizeof garbage);
  EXPECT_EQ(ncclCommInitRank(&comm, 1, garbage, 0), ncclInvalidArgument);
  EXPECT_NE(last().find("malformed unique id"), std::string::npos) << last();
  EXPECT_EQ(comm, nullptr);
}

TEST(NcclArgs, Configs) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ncclConfig_t bad_magic = NCCL_CONFIG_INITIALIZER;
  bad_magic.magic = 0x12345678;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &bad_magic), ncclInvalidArgument);
  EXPECT_NE(last().find("magic"), std::string::npos) << last();
  ncclConfig_t newer = NCCL_CONFIG_INITIALIZER;
  newer.version = 23000;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &newer), ncclInvalidArgument);
  EXPECT_NE(last().find("23000"), std::string::npos) << last();
  ncclConfig_t ancient = NCCL_CONFIG_INITIALIZER;
  ancient.version = 21300;  // before ncclConfig_t existed
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &ancient), ncclInvalidArgument);
  ncclConfig_t bad_blocking = NCCL_CONFIG_INITIALIZER;
  bad_blocking.blocking = 7;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &bad_blocking), ncclInvalidArgument);
  // A config from NCCL 2.17: shorter (up to splitShare); the fields after it are garbage the library must not read.
  ncclConfig_t older;
  std::memset(&older, 0x7f, sizeof older);
  older.size = offsetof(ncclConfig_t, trafficClass);
  older.magic = 0xcafebeef;
  older.version = 21700;
  older.blocking = 1;
  older.cgaClusterSize = older.minCTAs = older.maxCTAs = older.splitShare = NCCL_CONFIG_UNDEF_INT;
  older.netName = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &older), ncclSuccess) << last();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  // maxCTAs limits the device kernels' thread blocks (CommConfig::cuda_blocks); it must be at least 1. The hints
  // zerowire has no use for (minCTAs, netName, ...) are accepted.
  ncclConfig_t bad_ctas = NCCL_CONFIG_INITIALIZER;
  bad_ctas.maxCTAs = 0;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &bad_ctas), ncclInvalidArgument);
  EXPECT_NE(last().find("maxCTAs is 0"), std::string::npos) << last();
  ncclConfig_t hinted = NCCL_CONFIG_INITIALIZER;
  hinted.maxCTAs = 8;
  hinted.minCTAs = 2;
  hinted.netName = "IB";
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &hinted), ncclSuccess) << last();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(NcclArgs, OperationArguments) {
  run_ranks(2, [](int r, ncclComm_t comm) {
    std::vector<float> buf(64, 1.0f);
    float* p = buf.data();
    EXPECT_EQ(ncclAllReduce(p, p, 4, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm, nullptr),
              ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(p, p, 4, static_cast<ncclDataType_t>(-3), ncclSum, comm, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(p, p, 4, ncclFloat, static_cast<ncclRedOp_t>(ncclNumOps + 5), comm, nullptr),
              ncclInvalidArgument);
    EXPECT_NE(ncclGetLastError(comm), nullptr);
    EXPECT_NE(std::string(ncclGetLastError(comm)).find("PreMulSum"), std::string::npos) << ncclGetLastError(comm);
    EXPECT_EQ(ncclAllReduce(nullptr, p, 4, ncclFloat, ncclSum, comm, nullptr), ncclInvalidArgument);  // count > 0
    EXPECT_EQ(ncclBroadcast(p, p, 4, ncclFloat, 2, comm, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclReduce(p, p, 4, ncclFloat, ncclSum, -1, comm, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclSend(p, 4, ncclFloat, 2, comm, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclRecv(p, 4, ncclFloat, -1, comm, nullptr), ncclInvalidArgument);
    // Types zerowire moves but cannot reduce: named, ncclInvalidUsage.
    EXPECT_EQ(ncclAllReduce(p, p, 4, ncclInt8, ncclSum, comm, nullptr), ncclInvalidUsage);
    EXPECT_EQ(ncclAllReduce(p, p, 4, ncclUint32, ncclMax, comm, nullptr), ncclInvalidUsage);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // no group open
    ncclRedOp_t op;
    double half = 0.5;
    EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &half, ncclInt32, ncclScalarHostImmediate, comm), ncclInvalidArgument);
    EXPECT_EQ(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument);
    // Unimplemented: the device API and cost simulation say so.
    EXPECT_EQ(ncclDevCommCreate(comm, nullptr, nullptr), ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(comm)).find("device API"), std::string::npos);
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
    // Still usable after all that.
    EXPECT_NCCL_OK(ncclAllReduce(p, p, 64, ncclFloat, ncclSum, comm, nullptr));
    EXPECT_EQ(buf[63], 2.0f) << "rank " << r;
  });
}

}  // namespace
}  // namespace zw::nccl_test
