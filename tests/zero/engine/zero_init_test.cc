// tests/zero/engine/zero_init_test.cc — per-rank initialisation (model::init_gpt_slice): every slice a ZeRO-3 rank
// asks for equals, bit for bit, the same elements of model::init_gpt_params over the whole model (several models,
// seeds, world sizes 1-8 and odd slices), a unit's values do not depend on the padding the layout was made with
// (padding reads 0), and an engine initialised shard by shard on 3 ranks gathers exactly the single-process initial
// values. A change of the init rules in model/gpt_layout.cc that breaks the counter-based contract fails here.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/gpt_layout.h"
#include "tests/zero/engine/rank_threads.h"
#include "zero/engine/engine.h"

namespace zw::zero {
namespace {

std::vector<float> whole(const model::GptLayout& layout, uint64_t seed) {
  std::vector<float> v(size_t(layout.total_numel));
  EXPECT_TRUE(
      model::init_gpt_params(layout, seed, tensor::Tensor::host(v.data(), tensor::Shape{int64_t(v.size())})).ok());
  return v;
}

TEST(ZeroInit, EverySliceEqualsTheWholeModelInit) {
  const model::GptConfig models[] = {{1, 32, 2, 8, 64}, {2, 48, 4, 16, 256}, {3, 16, 2, 8, 50}};
  for (const model::GptConfig& m : models) {
    for (uint64_t seed : {uint64_t(1), uint64_t(1337)}) {
      for (int world : {1, 2, 3, 4, 5, 8}) {
        const model::GptLayout layout = model::make_gpt_layout(m, int64_t(world) * 16).value();
        const std::vector<float> want = whole(layout, seed);
        for (size_t u = 0; u < layout.units.size(); ++u) {
          const int64_t P = layout.units[u].padded_numel, S = P / world;
          std::vector<float> got(static_cast<size_t>(S));
          for (int r = 0; r < world; ++r) {
            ASSERT_TRUE(model::init_gpt_slice(layout, seed, int(u), r * S, S, got.data()).ok());
            ASSERT_EQ(std::memcmp(got.data(), want.data() + layout.units[u].offset + r * S, size_t(S) * 4), 0)
                << "unit " << u << " rank " << r << " of " << world << " seed " << seed;
          }
          const int64_t begin = P / 3 + 1, count = P / 5 + 7;  // an odd slice
          got.resize(size_t(count));
          ASSERT_TRUE(model::init_gpt_slice(layout, seed, int(u), begin, count, got.data()).ok());
          ASSERT_EQ(std::memcmp(got.data(), want.data() + layout.units[u].offset + begin, size_t(count) * 4), 0);
        }
      }
    }
  }
  const model::GptLayout layout = model::make_gpt_layout(models[0], 16).value();
  std::vector<float> out(8);
  Status bad = model::init_gpt_slice(layout, 1, 0, layout.units[0].padded_numel - 4, 8, out.data());
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("outside the layout"), std::string::npos) << bad.to_string();
}

TEST(ZeroInit, ValuesDoNotDependOnThePadding) {
  const model::GptConfig m{2, 48, 4, 16, 250};
  const model::GptLayout tight = model::make_gpt_layout(m, 1).value();
  const std::vector<float> want = whole(tight, 9);
  for (int64_t align : {16, 48, 128}) {
    const model::GptLayout padded = model::make_gpt_layout(m, align).value();
    const std::vector<float> got = whole(padded, 9);
    for (size_t u = 0; u < padded.units.size(); ++u) {
      const tensor::UnitLayout& a = tight.units[u];
      const tensor::UnitLayout& b = padded.units[u];
      ASSERT_EQ(a.numel, b.numel);
      EXPECT_EQ(std::memcmp(want.data() + a.offset, got.data() + b.offset, size_t(a.numel) * 4), 0)
          << "unit " << u << " align " << align;
      for (int64_t i = b.numel; i < b.padded_numel; ++i)
        ASSERT_EQ(got[size_t(b.offset + i)], 0.0f) << "padding of unit " << u << " align " << align;
    }
  }
}

TEST(ZeroInit, ShardByShardEngineGathersTheSingleProcessValues) {
  const model::GptConfig m{2, 32, 2, 16, 64};
  const int world = 3;
  const model::GptLayout layout = model::make_gpt_layout(m, int64_t(world) * 16).value();
  const std::vector<float> want = whole(layout, 7);
  testing::run_ranks(world, [&](int, Communicator& comm) {
    auto cfg = parse_zero_config(R"({"train_batch_size": 3, "zero_optimization": {"stage": 3}})", world, "test");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    auto e = Engine::create(comm, cfg.value(), layout, EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    int64_t computed = 0;
    ASSERT_TRUE((*e)->init_shards([&](int u, int64_t begin, int64_t count, float* out) {
                      computed += count;
                      return model::init_gpt_slice(layout, 7, u, begin, count, out);
                    })
                    .ok());
    EXPECT_LE(computed, layout.total_numel / world + 1);  // this rank's part only
    for (size_t u = 0; u < layout.units.size(); ++u) {
      std::vector<float> got(size_t(layout.units[u].numel));
      ASSERT_TRUE((*e)->gather_unit(int(u), got.data()).ok());
      ASSERT_EQ(std::memcmp(got.data(), want.data() + layout.units[u].offset, got.size() * 4), 0) << "unit " << u;
    }
  });
}

}  // namespace
}  // namespace zw::zero
