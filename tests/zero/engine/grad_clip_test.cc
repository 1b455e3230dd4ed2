// Gradient clipping: the global norm over ZeRO-3 shards (ranks as threads, world 1..5, padded units) against a
// serial long-double reference; padding does not change the local sum; DeepSpeed's combined scale, including the
// unclipped, clipped, disabled and non-finite cases; fp16/bf16 shards.
#include "zero/engine/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/collectives/harness.h"

namespace zw::zero {
namespace {

// A deterministic "full gradient" of one unit: numel values, then zero padding up to padded.
std::vector<float> unit_gradient(int64_t numel, int64_t padded, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> g(padded, 0.0f);
  for (int64_t i = 0; i < numel; ++i) g[i] = dist(rng);
  return g;
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

TEST(GradClip, GlobalNormOverShardsMatchesSerialReference) {
  const std::vector<int64_t> unit_numels = {1, 1000, 4097, 33};
  for (int world : {1, 2, 3, 4, 5}) {
    std::vector<std::vector<float>> units;
    long double ref = 0.0L;
    for (size_t u = 0; u < unit_numels.size(); ++u) {
      units.push_back(unit_gradient(unit_numels[u], round_up(unit_numels[u], world * 16), 7 + u));
      for (int64_t i = 0; i < unit_numels[u]; ++i) ref += static_cast<long double>(units[u][i]) * units[u][i];
    }
    const double expected = std::sqrt(static_cast<double>(ref));
    CommConfig config;
    config.transport = "shm";
    config.timeout_s = 60;
    test::run_ranks(world, config, [&](int rank, Communicator& comm) {
      std::vector<GradSpan> shards;
      for (const auto& g : units) {
        const size_t s = g.size() / world;
        shards.push_back({g.data() + rank * s, s, DataType::kFloat32});
      }
      auto norm = global_grad_norm(comm, shards);
      ASSERT_TRUE(norm.ok()) << norm.status().to_string();
      EXPECT_NEAR(norm.value(), expected, expected * 1e-13) << "world " << world << " rank " << rank;
    });
  }
}

TEST(GradClip, PaddingZerosDoNotChangeTheSum) {
  std::vector<float> g = unit_gradient(1001, 1001, 3);
  const double base = sum_of_squares({g.data(), g.size(), DataType::kFloat32}).value();
  g.resize(1001 + 63, 0.0f);
  EXPECT_EQ(sum_of_squares({g.data(), g.size(), DataType::kFloat32}).value(), base);  // bitwise
  EXPECT_EQ(sum_of_squares({nullptr, 0, DataType::kFloat32}).value(), 0.0);
}

TEST(GradClip, HalfPrecisionShards) {
  // 3-4-5 in every 16-bit type: 1.0 = 0x3c00 (f16) / 0x3f80 (bf16); 2.0 = 0x4000 / 0x4000.
  const std::vector<uint16_t> f16 = {0x3c00, 0x4000, 0x4000, 0x4000, 0x4000};  // 1, 2, 2, 2, 2 -> 17
  const std::vector<uint16_t> bf16 = {0x3f80, 0x4000, 0x4000, 0x4000, 0x4000};
  EXPECT_EQ(sum_of_squares({f16.data(), f16.size(), DataType::kFloat16}).value(), 17.0);
  EXPECT_EQ(sum_of_squares({bf16.data(), bf16.size(), DataType::kBFloat16}).value(), 17.0);
  int64_t x = 1;
  EXPECT_FALSE(sum_of_squares({&x, 1, DataType::kInt64}).ok());
}

TEST(GradClip, CombinedScaleFollowsDeepSpeed) {
  // Gradients (3, 4) · loss scale 8: scaled norm 40, true norm 5.
  const double loss_scale = 8.0;
  ClipResult none = clip_from_norm(40.0, loss_scale, 10.0);  // 5 < 10: no clipping
  EXPECT_EQ(none.norm, 5.0);
  EXPECT_EQ(none.clip_coef, 1.0);
  EXPECT_EQ(none.grad_scale, 0.125f);
  EXPECT_TRUE(none.finite);

  ClipResult clipped = clip_from_norm(40.0, loss_scale, 1.0);
  const double clip = (5.0 + 1e-6) / 1.0;
  EXPECT_EQ(clipped.grad_scale, static_cast<float>(1.0 / (clip * loss_scale)));
  EXPECT_NEAR(clipped.clip_coef, 1.0 / (5.0 + 1e-6), 1e-15);
  // The clipped gradient (3, 4)·8·grad_scale has norm max_norm·5/(5 + 1e-6).
  const double g0 = 24.0 * clipped.grad_scale, g1 = 32.0 * clipped.grad_scale;
  EXPECT_NEAR(std::sqrt(g0 * g0 + g1 * g1), 5.0 / (5.0 + 1e-6), 1e-7);

  EXPECT_EQ(clip_from_norm(40.0, loss_scale, 0.0).grad_scale, 0.125f);  // clipping off
  EXPECT_LT(clip_from_norm(40.0, loss_scale, 5.0).clip_coef, 1.0);      // norm == max_norm: the 1e-6 clips
  EXPECT_EQ(clip_from_norm(40.0, loss_scale, 5.1).clip_coef, 1.0);

  ClipResult bad = clip_from_norm(std::numeric_limits<double>::infinity(), loss_scale, 1.0);
  EXPECT_FALSE(bad.finite);
  EXPECT_FALSE(clip_from_norm(std::nan(""), loss_scale, 1.0).finite);
}

TEST(GradClip, ClipGradScaleOverRanks) {
  CommConfig config;
  config.transport = "shm";
  config.timeout_s = 60;
  test::run_ranks(3, config, [&](int rank, Communicator& comm) {
    // The whole gradient is (3, 4) · loss scale 1024, both on rank 1; the other shards are all zero.
    std::vector<float> g(6, 0.0f);
    if (rank == 1) {
      g[2] = 3.0f * 1024;
      g[5] = 4.0f * 1024;
    }
    const GradSpan shard{g.data(), g.size(), DataType::kFloat32};
    auto r = clip_grad_scale(comm, {&shard, 1}, 1024.0, 2.5);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r.value().scaled_norm, 5.0 * 1024);
    EXPECT_EQ(r.value().norm, 5.0);
    EXPECT_EQ(r.value().grad_scale, static_cast<float>(1.0 / (((5.0 + 1e-6) / 2.5) * 1024.0)));
    EXPECT_FALSE(clip_grad_scale(comm, {&shard, 1}, 0.0, 1.0).ok());  // usage error: returns before communicating
  });
}

}  // namespace
}  // namespace zw::zero
