// tests/zero/engine/partition_test.cc — the partition manager: padding to world_size × alignment (an empty unit gets
// one quantum), rank-major shards, parameter pieces that cover every parameter element exactly once across ranks
// with the layout's decay flags, agreement with the GPT layout padded for the world, and refusal of bad arguments.
#include "zero/engine/partition.h"

#include <gtest/gtest.h>

#include <vector>

#include "model/gpt_layout.h"

namespace zw::zero {
namespace {

tensor::ParamLayout param(const char* name, tensor::Shape shape, bool decay) {
  return tensor::ParamLayout{name, shape, 0, decay};
}

// The model's layout (its own padding, 1, is ignored by the partition manager).
tensor::ModelLayout toy_layout() {
  std::vector<tensor::UnitLayout> units(3);
  units[0].name = "a";
  units[0].params = {param("a.w", {3, 5}, true), param("a.b", {5}, false)};
  units[1].name = "b";
  units[1].params = {param("b.w", {7}, true)};
  units[2].name = "empty";
  return tensor::make_layout(std::move(units), 1).value();
}

TEST(Partition, PadsUnitsToWorldTimesAlignment) {
  for (int world : {1, 2, 3, 4, 5, 8}) {
    auto pm = PartitionManager::create(toy_layout(), 0, world, 4);
    ASSERT_TRUE(pm.ok()) << pm.status().to_string();
    const tensor::ModelLayout& l = pm->layout();
    EXPECT_EQ(pm->world_size(), world);
    EXPECT_EQ(l.unit_align, world * 4);
    ASSERT_EQ(l.units.size(), 3u);
    EXPECT_EQ(l.units[0].numel, 20);
    EXPECT_EQ(l.units[1].numel, 7);
    int64_t offset = 0;
    for (const tensor::UnitLayout& u : l.units) {
      EXPECT_EQ(u.offset, offset) << u.name;  // units back to back in the padded flat space
      offset += u.padded_numel;
      EXPECT_EQ(u.padded_numel % (world * 4), 0) << u.name << " world " << world;
      EXPECT_GE(u.padded_numel, u.numel);
      if (u.numel == 0)
        EXPECT_EQ(u.padded_numel, world * 4);  // an empty unit still gets one quantum: every rank has a shard
      else
        EXPECT_LT(u.padded_numel - u.numel, world * 4);
    }
    EXPECT_EQ(l.total_numel, offset);
    EXPECT_EQ(pm->total_padded_numel(), offset);
    EXPECT_EQ(l.units[0].params[1].offset, 15);  // back to back, unpadded shapes kept
    EXPECT_EQ(l.units[0].params[0].shape, (tensor::Shape{3, 5}));
  }
}

TEST(Partition, PiecesCoverEveryElementOnceAcrossRanks) {
  for (int world : {1, 2, 3, 4, 5, 8}) {
    std::vector<std::vector<int>> hits(3);
    int64_t shard_total = 0;
    for (int r = 0; r < world; ++r) {
      auto pm = PartitionManager::create(toy_layout(), r, world, 1);
      ASSERT_TRUE(pm.ok());
      if (r == 0)
        for (int u = 0; u < 3; ++u) hits[u].assign(size_t(pm->unit(u).numel), 0);
      shard_total += pm->total_shard_numel();
      for (const ShardPiece& p : pm->pieces()) {
        const int64_t S = pm->shard_numel(p.unit);
        const int64_t in_unit = int64_t(r) * S + (p.shard_offset - pm->shard_offset(p.unit));  // rank-major
        const tensor::ParamLayout& param = pm->unit(p.unit).params[p.param];
        ASSERT_GE(in_unit, param.offset);
        ASSERT_LE(in_unit + p.numel, param.offset + param.numel());
        EXPECT_EQ(p.weight_decay, pm->weight_decay(p.unit, p.param));
        EXPECT_EQ(p.weight_decay, param.weight_decay);
        for (int64_t i = 0; i < p.numel; ++i) ++hits[p.unit][size_t(in_unit + i)];
      }
    }
    for (const auto& unit_hits : hits)
      for (int h : unit_hits) EXPECT_EQ(h, 1) << "world " << world;
    auto pm0 = PartitionManager::create(toy_layout(), 0, world, 1);
    EXPECT_EQ(shard_total, pm0->total_padded_numel());
  }
}

TEST(Partition, DecayFlagsComeFromTheLayout) {
  auto pm = PartitionManager::create(toy_layout(), 0, 1, 1);
  ASSERT_TRUE(pm.ok());
  EXPECT_TRUE(pm->weight_decay(0, 0));
  EXPECT_FALSE(pm->weight_decay(0, 1));
  EXPECT_TRUE(pm->weight_decay(1, 0));
}

TEST(Partition, MatchesTheGptLayoutPaddedForTheWorld) {
  const model::GptConfig config{2, 32, 2, 16, 256};
  for (int world : {1, 2, 4}) {
    auto gpt = model::make_gpt_layout(config, int64_t(world) * 16);
    ASSERT_TRUE(gpt.ok());
    auto model16 = model::make_gpt_layout(config, 16);  // the model's own padding does not matter
    ASSERT_TRUE(model16.ok());
    auto pm = PartitionManager::create(*model16, world - 1, world, 16);
    ASSERT_TRUE(pm.ok());
    ASSERT_EQ(pm->num_units(), int(gpt->units.size()));
    for (int u = 0; u < pm->num_units(); ++u) {
      EXPECT_EQ(pm->unit(u).padded_numel, gpt->units[u].padded_numel);
      EXPECT_EQ(pm->unit(u).offset, gpt->units[u].offset);
      for (size_t p = 0; p < gpt->units[u].params.size(); ++p)
        EXPECT_EQ(pm->unit(u).params[p].offset, gpt->units[u].params[p].offset);
    }
    EXPECT_EQ(pm->total_padded_numel(), gpt->total_numel);
    EXPECT_EQ(pm->total_shard_numel() * world, gpt->total_numel);
  }
}

TEST(Partition, RejectsBadArguments) {
  EXPECT_EQ(PartitionManager::create(toy_layout(), 2, 2, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PartitionManager::create(toy_layout(), 0, 0, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PartitionManager::create(toy_layout(), 0, 2, 0).status().code(), Code::kInvalidArgument);
  tensor::ModelLayout negative = toy_layout();
  negative.units[1].params[0].shape = tensor::Shape{-7};
  auto bad = PartitionManager::create(negative, 0, 1, 1);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("b.w has a negative extent"), std::string::npos) << bad.status().to_string();
}

}  // namespace
}  // namespace zw::zero
