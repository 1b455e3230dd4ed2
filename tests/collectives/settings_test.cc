// Communicator settings whose default depends on the transport and the world size.
#include <gtest/gtest.h>

#include <limits>

#include "collectives/comm_impl.h"
#include "common/knobs.h"

namespace zw::test {
namespace {

internal::CommSettings settings_for(const std::string& transport, int64_t tree_threshold = -1) {
  CommConfig c;
  c.transport = transport;
  c.tree_threshold = tree_threshold;
  auto s = internal::resolve_settings(c);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? s.value() : internal::CommSettings{};
}

// ZW_TREE_THRESHOLD left at auto: 1M over tcp in power-of-two worlds (recursive doubling/halving without folding),
// 64K in other tcp worlds and over shm; a value in the config wins everywhere.
TEST(TreeThresholdDefault, AutoIs1MOverTcpInPowerOfTwoWorlds) {
  if (knobs().tree_threshold != kAutoBytes) GTEST_SKIP() << "ZW_TREE_THRESHOLD is set in the environment";
  const internal::CommSettings tcp = settings_for("tcp"), shm = settings_for("shm");
  for (int n : {1, 2, 4, 8, 16}) EXPECT_EQ(internal::resolve_tree_threshold(tcp, n), size_t{1} << 20) << n << " ranks";
  for (int n : {3, 5, 6, 7, 12}) EXPECT_EQ(internal::resolve_tree_threshold(tcp, n), size_t{64} << 10) << n << " ranks";
  for (int n : {2, 3, 4, 8}) EXPECT_EQ(internal::resolve_tree_threshold(shm, n), size_t{64} << 10) << n << " ranks";
  for (const char* transport : {"tcp", "shm"})
    for (int n : {2, 3, 4})
      EXPECT_EQ(internal::resolve_tree_threshold(settings_for(transport, 4096), n), size_t{4096}) << transport;
}

// A timeout that overflows int64 milliseconds (1e300 s, inf) used to be accepted, and every wait then "timed out
// after 0 ms"; it is refused with the setting's name. 1e9 s is the largest accepted.
TEST(TimeoutSetting, HugeOrInfiniteIsRefused) {
  for (double t : {1e300, 1e10, std::numeric_limits<double>::infinity()}) {
    CommConfig c;
    c.timeout_s = t;
    auto s = internal::resolve_settings(c);
    ASSERT_FALSE(s.ok()) << t;
    EXPECT_NE(s.status().message().find("ZW_TIMEOUT"), std::string::npos) << s.status().to_string();
  }
  CommConfig ok;
  ok.timeout_s = 1e9;
  EXPECT_TRUE(internal::resolve_settings(ok).ok());
}

// CommConfig::cuda_blocks (libzwnccl's ncclConfig_t::maxCTAs) wins over ZW_CUDA_BLOCKS; unset, the knob's value holds.
TEST(CudaBlocksSetting, TheConfigWinsOverTheKnob) {
  CommConfig c;
  c.cuda_blocks = 8;
  auto s = internal::resolve_settings(c);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->cuda_blocks, 8);
  auto d = internal::resolve_settings(CommConfig{});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->cuda_blocks, knobs().cuda_blocks);
}

}  // namespace
}  // namespace zw::test
