// Eager slot credits over tcp under floods: the receiver returns emptied inbox slots in batches (piggybacked on
// its EAGER and clear-to-send messages, in a CREDIT message once half are owed, or before it blocks). Many
// small operations issued back to back in both directions, broadcasts whose root runs ahead of receivers that
// never send it eager data, and eager transfers mixed with clear-to-send ones must all finish with the right
// bytes; a credit that is never returned shows up as a timeout. Ranks are threads (tests/collectives/harness.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "collectives/comm_impl.h"
#include "common/knobs.h"
#include "tests/collectives/harness.h"

namespace zw::test {
namespace {

constexpr int kOps = 300;

CommConfig tcp_config() {
  CommConfig c;
  c.transport = "tcp";
  c.timeout_s = 30;  // a lost credit stalls a sender until this deadline
  c.eager_bytes = 16 << 10;
  return c;
}

// Elements of operation i: mostly eager (a few bytes to 8 KiB per block), every 7th above the eager limit.
size_t count_of(int i) { return i % 7 == 6 ? 6000 + static_cast<size_t>(i) : 1 + static_cast<size_t>(i) * 37 % 2048; }

float value(int rank, int op, size_t i) {
  return static_cast<float>(rank * 100003 + op * 31 + static_cast<int>(i % 997));
}

class TcpEagerCredits : public ::testing::TestWithParam<int> {};

// Every rank issues all its all-gathers before waiting for any: the queue runs them back to back, so each pair
// exchanges eager data both ways as fast as the slots allow.
TEST_P(TcpEagerCredits, BackToBackAllGathersInBothDirections) {
  const int n = GetParam();
  run_ranks(n, tcp_config(), [&](int r, Communicator& comm) {
    std::vector<std::vector<float>> in(kOps), out(kOps);
    std::vector<Work> works;
    for (int i = 0; i < kOps; ++i) {
      const size_t count = count_of(i);
      in[i].resize(count);
      out[i].assign(count * static_cast<size_t>(n), -1.0f);
      for (size_t k = 0; k < count; ++k) in[i][k] = value(r, i, k);
      CollectiveOptions o{MemRef::host(in[i].data(), count * 4), MemRef::host(out[i].data(), out[i].size() * 4), count,
                          DataType::kFloat32};
      auto work = all_gather(comm, o);
      ASSERT_TRUE(work.ok()) << work.status().to_string();
      works.push_back(std::move(work).value());
    }
    for (int i = 0; i < kOps; ++i) {
      Status st = works[static_cast<size_t>(i)].wait();
      ASSERT_TRUE(st.ok()) << "rank " << r << " op " << i << ": " << st.to_string();
      const size_t count = count_of(i);
      for (int src = 0; src < n; ++src)
        for (size_t k = 0; k < count; ++k)
          ASSERT_EQ(out[i][static_cast<size_t>(src) * count + k], value(src, i, k))
              << "rank " << r << " op " << i << " block " << src << " element " << k;
    }
  });
}

// The root floods broadcasts and never receives eager data, so it is owed credits it cannot get piggybacked;
// the receivers pause now and then, so the root runs out of slots and must get them back in CREDIT messages.
TEST_P(TcpEagerCredits, BroadcastRootRunsAheadOfSlowReceivers) {
  const int n = GetParam();
  run_ranks(n, tcp_config(), [&](int r, Communicator& comm) {
    std::vector<std::vector<float>> buf(kOps);
    std::vector<Work> works;
    for (int i = 0; i < kOps; ++i) {
      const size_t count = count_of(i) / 2 + 1;
      buf[i].assign(count, -1.0f);
      if (r == 0)
        for (size_t k = 0; k < count; ++k) buf[i][k] = value(0, i, k);
      if (r != 0 && i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      CollectiveOptions o{MemRef::host(buf[i].data(), count * 4), MemRef::host(buf[i].data(), count * 4), count,
                          DataType::kFloat32};
      auto work = broadcast(comm, o);
      ASSERT_TRUE(work.ok()) << work.status().to_string();
      works.push_back(std::move(work).value());
    }
    for (int i = 0; i < kOps; ++i) {
      Status st = works[static_cast<size_t>(i)].wait();
      ASSERT_TRUE(st.ok()) << "rank " << r << " op " << i << ": " << st.to_string();
      for (size_t k = 0; k < buf[i].size(); ++k)
        ASSERT_EQ(buf[i][k], value(0, i, k)) << "rank " << r << " op " << i << " element " << k;
    }
  });
}

// ZW_EAGER_BYTES left at auto: 64K over tcp, 16K over shm; a value in the config wins for both.
TEST(TcpEagerDefault, AutoIs64KOverTcpAnd16KOverShm) {
  if (knobs().eager_bytes != kAutoBytes) GTEST_SKIP() << "ZW_EAGER_BYTES is set in the environment";
  CommConfig c;
  c.transport = "tcp";
  auto tcp = internal::resolve_settings(c);
  ASSERT_TRUE(tcp.ok()) << tcp.status().to_string();
  EXPECT_EQ(tcp.value().eager.bytes, size_t{64} << 10);
  c.transport = "shm";
  auto shm = internal::resolve_settings(c);
  ASSERT_TRUE(shm.ok()) << shm.status().to_string();
  EXPECT_EQ(shm.value().eager.bytes, size_t{16} << 10);
  c.transport = "tcp";
  c.eager_bytes = 4096;
  auto set = internal::resolve_settings(c);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set.value().eager.bytes, size_t{4096});
}

INSTANTIATE_TEST_SUITE_P(World, TcpEagerCredits, ::testing::Values(2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace zw::test
