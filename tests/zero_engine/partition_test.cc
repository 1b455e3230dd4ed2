// tests/zero_engine/partition_test.cc — the partition manager: padding to world_size × alignment, rank-major
// shards, parameter pieces that cover every parameter element exactly once across ranks, agreement with the GPT
// layout, and the ModelLayout contract of the sharded checkpoint.
#include "zero/partition.h"

#include <gtest/gtest.h>

#include <vector>

namespace zw::zero {
namespace {

std::vector<UnitSpec> toy_units() {
  return {UnitSpec{"a", {ParamSpec{"a.w", {3, 5}, true}, ParamSpec{"a.b", {5}, false}}},
          UnitSpec{"b", {ParamSpec{"b.w", {7}, true}}}, UnitSpec{"empty", {}}};
}

TEST(Partition, PadsUnitsToWorldTimesAlignment) {
  for (int world : {1, 2, 3, 4, 5, 8}) {
    auto pm = PartitionManager::create(toy_units(), 0, world, 4);
    ASSERT_TRUE(pm.ok()) << pm.status().to_string();
    const ModelLayout& l = pm->layout();
    EXPECT_EQ(l.world_size, world);
    ASSERT_EQ(l.units.size(), 3u);
    EXPECT_EQ(l.units[0].numel, 20);
    EXPECT_EQ(l.units[1].numel, 7);
    for (const UnitLayout& u : l.units) {
      EXPECT_EQ(u.padded_numel % (world * 4), 0) << u.name << " world " << world;
      EXPECT_GE(u.padded_numel, u.numel);
      if (u.numel == 0)
        EXPECT_EQ(u.padded_numel, world * 4);  // an empty unit still gets one quantum: every rank has a shard
      else
        EXPECT_LT(u.padded_numel - u.numel, world * 4);
    }
    EXPECT_EQ(l.units[0].params[1].offset, 15);  // back to back, unpadded shapes kept
    EXPECT_EQ(l.units[0].params[0].shape, (std::vector<int64_t>{3, 5}));
  }
}

TEST(Partition, PiecesCoverEveryElementOnceAcrossRanks) {
  for (int world : {1, 2, 3, 4, 5, 8}) {
    std::vector<std::vector<int>> hits(3);
    int64_t shard_total = 0;
    for (int r = 0; r < world; ++r) {
      auto pm = PartitionManager::create(toy_units(), r, world, 1);
      ASSERT_TRUE(pm.ok());
      if (r == 0)
        for (int u = 0; u < 3; ++u) hits[u].assign(size_t(pm->unit(u).numel), 0);
      shard_total += pm->total_shard_numel();
      for (const ShardPiece& p : pm->pieces()) {
        const int64_t S = pm->shard_numel(p.unit);
        const int64_t in_unit = int64_t(r) * S + (p.shard_offset - pm->shard_offset(p.unit));  // rank-major
        const ParamLayout& param = pm->unit(p.unit).params[p.param];
        ASSERT_GE(in_unit, param.offset);
        ASSERT_LE(in_unit + p.numel, param.offset + param.numel());
        EXPECT_EQ(p.weight_decay, pm->weight_decay(p.unit, p.param));
        for (int64_t i = 0; i < p.numel; ++i) ++hits[p.unit][size_t(in_unit + i)];
      }
    }
    for (const auto& unit_hits : hits)
      for (int h : unit_hits) EXPECT_EQ(h, 1) << "world " << world;
    auto pm0 = PartitionManager::create(toy_units(), 0, world, 1);
    EXPECT_EQ(shard_total, pm0->total_padded_numel());
  }
}

TEST(Partition, MatchesTheGptLayoutPaddedForTheWorld) {
  const tensor::GptConfig config{2, 32, 2, 16, 256};
  for (int world : {1, 2, 4}) {
    auto gpt = tensor::make_gpt_layout(config, size_t(world) * 16);
    ASSERT_TRUE(gpt.ok());
    auto pm = PartitionManager::create(PartitionManager::gpt_units(*gpt), world - 1, world, 16);
    ASSERT_TRUE(pm.ok());
    ASSERT_EQ(pm->num_units(), int(gpt->units.size()));
    for (int u = 0; u < pm->num_units(); ++u) {
      EXPECT_EQ(pm->unit(u).padded_numel, int64_t(gpt->units[u].padded_numel));
      for (size_t p = 0; p < gpt->units[u].slots.size(); ++p)
        EXPECT_EQ(pm->unit(u).params[p].offset, int64_t(gpt->units[u].slots[p].offset));
    }
    EXPECT_EQ(pm->total_padded_numel(), int64_t(gpt->total_numel));
    EXPECT_EQ(pm->total_shard_numel() * world, int64_t(gpt->total_numel));
  }
}

TEST(Partition, RejectsBadArguments) {
  EXPECT_EQ(PartitionManager::create(toy_units(), 2, 2, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PartitionManager::create(toy_units(), 0, 0, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PartitionManager::create(toy_units(), 0, 2, 0).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace zw::zero
