// Communicator settings whose default depends on the transport and the world size.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace zw::test
