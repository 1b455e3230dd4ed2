// tests/zero_engine/zero_init_test.cc — per-rank initialisation (zw_train/zero_init.h): every slice a ZeRO-3 rank
// asks for equals, bit for bit, the same elements of tensor::init_gpt_params over the whole model (several models,
// seeds, world sizes 1-8 and odd slices), and an engine initialised shard by shard on 3 ranks gathers exactly the
// single-process initial values. A change of the init rules in tensor/gpt_layout.cc fails here.
#include "zw_train/zero_init.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tensor/gpt_layout.h"
#include "zero/engine.h"
#include "zero_engine/rank_threads.h"

namespace zw::train {
namespace {

std::vector<float> whole(const tensor::GptLayout& layout, uint64_t seed) {
  std::vector<float> v(layout.total_numel);
  EXPECT_TRUE(
      tensor::init_gpt_params(layout, seed, tensor::Tensor::host(v.data(), tensor::Shape{int64_t(v.size())})).ok());
  return v;
}

TEST(ZeroInit, EverySliceEqualsTheWholeModelInit) {
  const tensor::GptConfig models[] = {{1, 32, 2, 8, 64}, {2, 48, 4, 16, 256}, {3, 16, 2, 8, 50}};
  for (const tensor::GptConfig& m : models) {
    for (uint64_t seed : {uint64_t(1), uint64_t(1337)}) {
      for (int world : {1, 2, 3, 4, 5, 8}) {
        const tensor::GptLayout layout = tensor::make_gpt_layout(m, size_t(world) * 16).value();
        const std::vector<float> want = whole(layout, seed);
        for (size_t u = 0; u < layout.units.size(); ++u) {
          const int64_t P = int64_t(layout.units[u].padded_numel), S = P / world;
          std::vector<float> got(static_cast<size_t>(S));
          for (int r = 0; r < world; ++r) {
            ASSERT_TRUE(init_gpt_slice(layout, seed, int(u), r * S, S, got.data()).ok());
            ASSERT_EQ(std::memcmp(got.data(), want.data() + layout.units[u].offset + r * S, size_t(S) * 4), 0)
                << "unit " << u << " rank " << r << " of " << world << " seed " << seed;
          }
          const int64_t begin = P / 3 + 1, count = P / 5 + 7;  // an odd slice
          got.resize(size_t(count));
          ASSERT_TRUE(init_gpt_slice(layout, seed, int(u), begin, count, got.data()).ok());
          ASSERT_EQ(std::memcmp(got.data(), want.data() + layout.units[u].offset + begin, size_t(count) * 4), 0);
        }
      }
    }
  }
  const tensor::GptLayout layout = tensor::make_gpt_layout(models[0], 16).value();
  std::vector<float> out(8);
  Status bad = init_gpt_slice(layout, 1, 0, int64_t(layout.units[0].padded_numel) - 4, 8, out.data());
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("outside the layout"), std::string::npos) << bad.to_string();
}

TEST(ZeroInit, ShardByShardEngineGathersTheSingleProcessValues) {
  const tensor::GptConfig m{2, 32, 2, 16, 64};
  const int world = 3;
  const tensor::GptLayout layout = tensor::make_gpt_layout(m, size_t(world) * 16).value();
  const std::vector<float> want = whole(layout, 7);
  zero::testing::run_ranks(world, [&](int, Communicator& comm) {
    auto cfg = zero::parse_zero_config(R"({"train_batch_size": 3, "zero_optimization": {"stage": 3}})", world, "test");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    auto e = zero::Engine::create(comm, cfg.value(), zero::PartitionManager::gpt_units(layout), zero::EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    int64_t computed = 0;
    ASSERT_TRUE((*e)->init_shards([&](int u, int64_t begin, int64_t count, float* out) {
                      computed += count;
                      return init_gpt_slice(layout, 7, u, begin, count, out);
                    })
                    .ok());
    EXPECT_LE(computed, int64_t(layout.total_numel) / world + 1);  // this rank's part only
    for (size_t u = 0; u < layout.units.size(); ++u) {
      std::vector<float> got(layout.units[u].numel);
      ASSERT_TRUE((*e)->gather_unit(int(u), got.data()).ok());
      ASSERT_EQ(std::memcmp(got.data(), want.data() + layout.units[u].offset, got.size() * 4), 0) << "unit " << u;
    }
  });
}

}  // namespace
}  // namespace zw::train
