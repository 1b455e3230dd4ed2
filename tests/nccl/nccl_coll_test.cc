// libzwnccl on host memory (zerowire's extension) through NCCL's C API, ranks as threads: every collective against
// a serial reference at world sizes 1-4, send/recv in groups, several communicators created and used in one group
// by one thread (nccl-tests' -g N), split, shrink, registration, PreMulSum, non-blocking init, abort unblocking a
// waiting rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "nccl.h"
#include "nccl/nccl_test_util.h"

namespace zw::nccl_test {
namespace {

float val(int rank, size_t i) { return static_cast<float>(rank * 100 + static_cast<int>(i % 50)); }

class NcclHost : public ::testing::TestWithParam<int> {};

TEST_P(NcclHost, EveryCollective) {
  const int n = GetParam();
  const size_t count = 1031;
  run_ranks(n, [&](int r, ncclComm_t comm) {
    int got = -1;
    EXPECT_NCCL_OK(ncclCommCount(comm, &got));
    EXPECT_EQ(got, n);
    EXPECT_NCCL_OK(ncclCommUserRank(comm, &got));
    EXPECT_EQ(got, r);
    std::vector<float> in(count * n), out(count * n);
    for (size_t i = 0; i < in.size(); ++i) in[i] = val(r, i);
    auto poison = [&] { std::memset(out.data(), 0xA5, out.size() * 4); };

    poison();
    EXPECT_NCCL_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr));
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int p = 0; p < n; ++p) want += val(p, i);
      ASSERT_EQ(out[i], want) << "all_reduce rank " << r << " i " << i;
    }
    poison();
    EXPECT_NCCL_OK(ncclAllGather(in.data(), out.data(), count, ncclFloat, comm, nullptr));
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[p * count + i], val(p, i)) << "all_gather";
    poison();
    EXPECT_NCCL_OK(ncclReduceScatter(in.data(), out.data(), count, ncclFloat, ncclMax, comm, nullptr));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], val(n - 1, r * count + i)) << "reduce_scatter max";
    poison();
    const int root = n - 1;
    EXPECT_NCCL_OK(ncclBroadcast(in.data(), out.data(), count, ncclFloat, root, comm, nullptr));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], val(root, i)) << "broadcast";
    poison();
    EXPECT_NCCL_OK(ncclReduce(in.data(), out.data(), count, ncclFloat, ncclMin, 0, comm, nullptr));
    if (r == 0) {
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], val(0, i)) << "reduce min";
    }
    poison();
    EXPECT_NCCL_OK(ncclAlltoAll(in.data(), out.data(), count, ncclFloat, comm, nullptr));
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[p * count + i], val(p, r * count + i)) << "alltoall";
    poison();
    EXPECT_NCCL_OK(ncclGather(in.data(), out.data(), count, ncclFloat, root, comm, nullptr));
    if (r == root) {
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[p * count + i], val(p, i)) << "gather";
    }
    poison();
    EXPECT_NCCL_OK(ncclScatter(in.data(), out.data(), count, ncclFloat, root, comm, nullptr));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], val(root, r * count + i)) << "scatter";
    // In place, NCCL's placement.
    std::vector<float> a2a(in);  // all-to-all in place: NCCL accepts it (nccl-tests runs it); zerowire stages the input
    EXPECT_NCCL_OK(ncclAlltoAll(a2a.data(), a2a.data(), count, ncclFloat, comm, nullptr));
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(a2a[p * count + i], val(p, r * count + i)) << "alltoall in place";
    std::vector<float> rs(in);  // reduce-scatter, gather and scatter in place, as nccl-tests places them
    EXPECT_NCCL_OK(ncclReduceScatter(rs.data(), rs.data() + r * count, count, ncclFloat, ncclMax, comm, nullptr));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(rs[r * count + i], val(n - 1, r * count + i)) << "rs in place";
    std::vector<float> g(count * n);
    for (size_t i = 0; i < count; ++i) g[r * count + i] = val(r, i);
    EXPECT_NCCL_OK(ncclGather(g.data() + r * count, g.data(), count, ncclFloat, root, comm, nullptr));
    if (r == root) {
      for (int p = 0; p < n; ++p) ASSERT_EQ(g[p * count + 5], val(p, 5)) << "gather in place";
    }
    std::vector<float> sc(in);
    EXPECT_NCCL_OK(ncclScatter(sc.data(), sc.data() + r * count, count, ncclFloat, root, comm, nullptr));
    ASSERT_EQ(sc[r * count + 3], val(root, r * count + 3)) << "scatter in place";
    std::vector<float> ag(count * n);
    for (size_t i = 0; i < count; ++i) ag[r * count + i] = val(r, i);
    EXPECT_NCCL_OK(ncclAllGather(ag.data() + r * count, ag.data(), count, ncclFloat, comm, nullptr));
    for (int p = 0; p < n; ++p) ASSERT_EQ(ag[p * count + 7], val(p, 7));
    std::vector<int64_t> ints(100, r + 1);
    EXPECT_NCCL_OK(ncclAllReduce(ints.data(), ints.data(), 100, ncclInt64, ncclProd, comm, nullptr));
    int64_t prod = 1;
    for (int p = 0; p < n; ++p) prod *= p + 1;
    EXPECT_EQ(ints[99], prod);
  });
}

TEST_P(NcclHost, SendRecvInGroups) {
  const int n = GetParam();
  run_ranks(n, [&](int r, ncclComm_t comm) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (size_t count : {size_t{0}, size_t{3}, size_t{300000}}) {  // the last is many rendezvous chunks
      std::vector<int32_t> out(count, r), in(count, -1), self(count, -1);
      EXPECT_NCCL_OK(ncclGroupStart());
      EXPECT_NCCL_OK(ncclRecv(in.data(), count, ncclInt32, prev, comm, nullptr));  // receive first, then send:
      EXPECT_NCCL_OK(ncclSend(out.data(), count, ncclInt32, next, comm, nullptr));  // any order must work
      EXPECT_NCCL_OK(ncclSend(out.data(), count, ncclInt32, r, comm, nullptr));
      EXPECT_NCCL_OK(ncclRecv(self.data(), count, ncclInt32, r, comm, nullptr));
      EXPECT_NCCL_OK(ncclGroupEnd());
      if (count > 0) {
        EXPECT_EQ(in[count - 1], prev);
        EXPECT_EQ(self[0], r);
      }
    }
    // A collective and point-to-point in one group.
    std::vector<float> v(10, 1.0f);
    std::vector<float> token(1, static_cast<float>(r)), got(1, -1.0f);
    EXPECT_NCCL_OK(ncclGroupStart());
    EXPECT_NCCL_OK(ncclSend(token.data(), 1, ncclFloat, next, comm, nullptr));
    EXPECT_NCCL_OK(ncclAllReduce(v.data(), v.data(), 10, ncclFloat, ncclSum, comm, nullptr));
    EXPECT_NCCL_OK(ncclRecv(got.data(), 1, ncclFloat, prev, comm, nullptr));
    EXPECT_NCCL_OK(ncclGroupEnd());
    EXPECT_EQ(v[9], static_cast<float>(n));
    EXPECT_EQ(got[0], static_cast<float>(prev));
  });
}

TEST_P(NcclHost, PreMulSum) {
  const int n = GetParam();
  run_ranks(n, [&](int r, ncclComm_t comm) {
    ncclRedOp_t op;
    float factor = static_cast<float>(r + 1);
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &factor, ncclFloat, ncclScalarHostImmediate, comm), ncclSuccess);
    std::vector<float> v(257, 2.0f);
    EXPECT_NCCL_OK(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, op, comm, nullptr));
    EXPECT_EQ(v[256], static_cast<float>(n * (n + 1)));  // sum over ranks of 2 (r+1)
    EXPECT_NCCL_OK(ncclRedOpDestroy(op, comm));
    EXPECT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, op, comm, nullptr), ncclInvalidArgument);
  });
}

TEST_P(NcclHost, Split) {
  const int n = GetParam();
  run_ranks(n, [&](int r, ncclComm_t comm) {
    ncclComm_t child = nullptr;
    const int color = r % 2 == 0 ? 0 : 1;
    ASSERT_EQ(ncclCommSplit(comm, color, -r, &child, nullptr), ncclSuccess) << ncclGetLastError(comm);
    ASSERT_NE(child, nullptr);
    int size = 0, rank = -1;
    EXPECT_NCCL_OK(ncclCommCount(child, &size));
    EXPECT_NCCL_OK(ncclCommUserRank(child, &rank));
    const int members = color == 0 ? (n + 1) / 2 : n / 2;
    EXPECT_EQ(size, members);
    EXPECT_EQ(rank, (members - 1) - r / 2);  // key -r: reversed order
    std::vector<int32_t> v(5, r);
    EXPECT_NCCL_OK(ncclAllReduce(v.data(), v.data(), 5, ncclInt32, ncclSum, child, nullptr));
    int want = 0;
    for (int p = color; p < n; p += 2) want += p;
    EXPECT_EQ(v[4], want);
    EXPECT_NCCL_OK(ncclCommDestroy(child));
    // NCCL_SPLIT_NOCOLOR takes part and gets NULL.
    ncclComm_t none = reinterpret_cast<ncclComm_t>(1);
    ASSERT_EQ(ncclCommSplit(comm, r == 0 ? NCCL_SPLIT_NOCOLOR : 5, 0, &none, nullptr), ncclSuccess);
    if (r == 0) {
      EXPECT_EQ(none, nullptr);
    } else {
      ASSERT_NE(none, nullptr);
      EXPECT_NCCL_OK(ncclCommCount(none, &size));
      EXPECT_EQ(size, n - 1);
      EXPECT_NCCL_OK(ncclCommDestroy(none));
    }
  });
}

// Ranks 0..n-2 shrink the communicator without the last rank (which does not call it, as a failed rank would not).
TEST_P(NcclHost, ShrinkWithoutTheLastRank) {
  const int n = GetParam();
  if (n < 2) GTEST_SKIP() << "needs a rank to exclude";
  run_ranks(n, [&](int r, ncclComm_t comm) {
    if (r == n - 1) return;
    int gone = n - 1;
    ncclComm_t child = nullptr;
    ASSERT_EQ(ncclCommShrink(comm, &gone, 1, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclSuccess)
        << ncclGetLastError(comm);
    int size = 0, rank = -1;
    EXPECT_NCCL_OK(ncclCommCount(child, &size));
    EXPECT_NCCL_OK(ncclCommUserRank(child, &rank));
    EXPECT_EQ(size, n - 1);
    EXPECT_EQ(rank, r);
    int64_t v = r + 1;
    EXPECT_NCCL_OK(ncclAllReduce(&v, &v, 1, ncclInt64, ncclSum, child, nullptr));
    EXPECT_EQ(v, static_cast<int64_t>((n - 1) * n / 2));
    ncclComm_t none = nullptr;
    EXPECT_EQ(ncclCommShrink(comm, &r, 1, &none, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidUsage);  // self excluded
    EXPECT_EQ(none, nullptr);
    EXPECT_NCCL_OK(ncclCommDestroy(child));
  });
}

TEST_P(NcclHost, RegistrationIsAHint) {
  const int n = GetParam();
  run_ranks(n, [&](int r, ncclComm_t comm) {
    std::vector<float> buf(4096, 1.0f);
    void* handle = nullptr;
    ncclWindow_t win = nullptr;
    ASSERT_EQ(ncclCommRegister(comm, buf.data(), buf.size() * 4, &handle), ncclSuccess);
    ASSERT_EQ(ncclCommWindowRegister(comm, buf.data(), buf.size() * 4, &win, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
    EXPECT_NCCL_OK(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr));
    EXPECT_EQ(buf[4095], static_cast<float>(n));
    EXPECT_NCCL_OK(ncclCommWindowDeregister(comm, win));
    EXPECT_NCCL_OK(ncclCommDeregister(comm, handle));
    EXPECT_EQ(ncclCommDeregister(comm, nullptr), ncclInvalidArgument);
  });
}

INSTANTIATE_TEST_SUITE_P(World, NcclHost, ::testing::Values(1, 2, 3, 4));

// nccl-tests -g N: one thread creates the N ranks of a communicator inside one group and issues their operations
// in groups too.
TEST(NcclGroup, OneThreadDrivesSeveralRanks) {
  for (int n : {2, 3}) {
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<ncclComm_t> comms(n);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; ++r) ASSERT_EQ(ncclCommInitRank(&comms[r], n, id, r), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
    std::vector<std::vector<float>> bufs(n, std::vector<float>(1000));
    for (int round = 0; round < 3; ++round) {
      for (int r = 0; r < n; ++r) std::fill(bufs[r].begin(), bufs[r].end(), static_cast<float>(r + round));
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      for (int r = 0; r < n; ++r)
        ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), 1000, ncclFloat, ncclSum, comms[r], nullptr),
                  ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
      for (int r = 0; r < n; ++r) EXPECT_EQ(bufs[r][999], static_cast<float>(n * (n - 1) / 2 + n * round));
    }
    for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  }
}

TEST(NcclComm, NonBlockingInit) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      ncclComm_t comm = nullptr;
      ncclResult_t res = ncclCommInitRankConfig(&comm, 2, id, r, &config);
      ASSERT_TRUE(res == ncclInProgress || res == ncclSuccess) << ncclGetErrorString(res);
      ncclResult_t state = ncclInProgress;
      for (int i = 0; i < 100000 && state == ncclInProgress; ++i) {
        ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
        if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_EQ(state, ncclSuccess);
      double x = 1.5;
      EXPECT_NCCL_OK(ncclAllReduce(&x, &x, 1, ncclDouble, ncclSum, comm, nullptr));
      EXPECT_EQ(x, 3.0);
      EXPECT_EQ(ncclCommFinalize(comm), ncclSuccess);
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    });
  for (auto& t : threads) t.join();
}

// Rank 1 never joins rank 0's all-reduce; ncclCommAbort from another thread makes rank 0's call return an error.
TEST(NcclComm, AbortUnblocksAWaitingCall) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(ncclCommInitRank(&comms[r], 2, id, r), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::atomic<int> result{-1};
  std::vector<float> v(100000, 1.0f);
  std::thread waiter([&] {
    result = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comms[0], nullptr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(result.load(), -1) << "the all-reduce finished without its peer";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(result.load(), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
}

}  // namespace
}  // namespace zw::nccl_test
