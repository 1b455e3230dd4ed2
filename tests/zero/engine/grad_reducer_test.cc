// tests/zero/engine/grad_reducer_test.cc — the gradient reducer, ranks as threads:
//  - over two micro steps the accumulator holds, for this rank's shard, the sum over ranks and micro steps of every
//    unit's full gradient (rank-major slices), for worlds 1-4, with and without overlap_comm, for a bucket that holds
//    every unit, one that merges some and one smaller than a unit (split), in f32 and f16 (small integers: exact);
//  - without overlap no reduce-scatter is left running when reduce() returns, with it at least one and at most one;
//  - bucketing by positions: exact reduce-scatter counts, split units and bytes for four bucket sizes;
//  - f16 / bf16 communication of random gradients stays within the stated rounding bound of the f64 sum;
//  - an f16 sum that overflows (finite in f32) is inf in the accumulator, and the pre-division avoids it;
//  - more units holding gradients than buffers is a clear error.
#include "zero/engine/grad_reducer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tests/zero/engine/layout_util.h"
#include "tests/zero/engine/rank_threads.h"
#include "zero/engine/loss_scaler.h"

namespace zw::zero {
namespace {

using testing::run_ranks;

tensor::ModelLayout units() { return testing::single_param_units({"a", "b", "c"}, {33, 100, 7}); }

// Exact in any summation order, in f32 and f16: small integers.
float grad_value(int rank, int micro, int unit, int64_t i) {
  return float((rank + 1) * (micro + 2) + unit * 3 + i % 5);
}

// Runs `micro_steps` micro steps of units `order` through a reducer; gradients from `value(rank, micro, unit, i)`.
template <typename Value>
std::unique_ptr<GradReducer> drive(Communicator& comm, const PartitionManager& pm, std::vector<float>& acc,
                                   const GradReducerOptions& o, const std::vector<int>& order, int micro_steps,
                                   Value value) {
  auto r = GradReducer::create(comm, pm, MemRef::host(acc.data(), acc.size() * 4), o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return nullptr;
  for (int micro = 0; micro < micro_steps; ++micro) {
    for (int u : order) {
      auto g = (*r)->grads(u);
      EXPECT_TRUE(g.ok()) << g.status().to_string();
      if (!g.ok()) return nullptr;
      float* p = reinterpret_cast<float*>(g->data());
      for (int64_t i = 0; i < pm.unit(u).padded_numel; ++i) {
        EXPECT_EQ(p[i], 0.0f);  // zeroed for the model to accumulate into
        p[i] = value(pm.rank(), micro, u, i);
      }
      EXPECT_TRUE((*r)->reduce(u).ok());
    }
    EXPECT_TRUE((*r)->flush().ok());
  }
  return std::move(r.value());
}

struct SumCase {
  int world;
  bool overlap;
  int64_t bucket;  // reduce_bucket_size, elements of all ranks
  DataType dtype;
};

class Reduce : public ::testing::TestWithParam<SumCase> {};

TEST_P(Reduce, AccumulatesTheSumOverRanksAndMicroSteps) {
  const SumCase k = GetParam();
  run_ranks(k.world, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units(), rank, k.world, 2);
    ASSERT_TRUE(pm.ok());
    std::vector<float> acc(size_t(pm->total_shard_numel()), 0.0f);
    GradReducerOptions o;
    o.overlap_comm = k.overlap;
    o.reduce_bucket_numel = k.bucket;
    o.comm_dtype = k.dtype;
    auto r = drive(comm, *pm, acc, o, {2, 0, 1}, 2, grad_value);
    ASSERT_TRUE(r);
    for (int u = 0; u < pm->num_units(); ++u) {
      const int64_t S = pm->shard_numel(u);
      for (int64_t i = 0; i < S; ++i) {
        float want = 0;
        for (int q = 0; q < k.world; ++q)
          for (int micro = 0; micro < 2; ++micro) want += grad_value(q, micro, u, int64_t(rank) * S + i);
        ASSERT_EQ(acc[size_t(pm->shard_offset(u) + i)], want) << "rank " << rank << " unit " << u << " i " << i;
      }
    }
    const GradReducerStats& st = r->stats();
    EXPECT_GE(st.reduces, 2);  // at least one bucket per micro step
    if (k.overlap) {
      EXPECT_EQ(st.max_in_flight, 1);  // each bucket is left running when it is issued
    } else {
      EXPECT_EQ(st.max_in_flight, 0);  // waited for when issued
      EXPECT_EQ(st.overlapped, 0);
    }
  });
}

// Buckets: every unit (1e9), about two of them (60 · world), less than the largest (24 · world: b is split).
std::vector<SumCase> sum_cases() {
  std::vector<SumCase> out;
  for (int w : {1, 2, 3, 4})
    for (bool overlap : {false, true})
      for (int64_t per_rank : {int64_t(1000000000), int64_t(60), int64_t(24)})
        for (DataType dt : {DataType::kFloat32, DataType::kFloat16})
          out.push_back(SumCase{w, overlap, per_rank == 1000000000 ? per_rank : per_rank * w, dt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(WorldsOverlapBuckets, Reduce, ::testing::ValuesIn(sum_cases()),
                         [](const ::testing::TestParamInfo<SumCase>& i) {
                           return "w" + std::to_string(i.param.world) + (i.param.overlap ? "_overlap" : "_sync") +
                                  "_bucket" + std::to_string(i.param.bucket) + "_" +
                                  (i.param.dtype == DataType::kFloat16 ? "f16" : "f32");
                         });

// Units of 8, 8, 8 and 40 elements on 2 ranks (shards of 4, 4, 4 and 20), reduced in that order, one micro step.
struct BucketCase {
  int64_t bucket;    // reduce_bucket_size
  int64_t capacity;  // elements per rank per bucket
  int64_t reduces;   // reduce-scatters
  int64_t split;     // units cut into several
};

class Buckets : public ::testing::TestWithParam<BucketCase> {};

TEST_P(Buckets, CountsFollowTheBucketSize) {
  const BucketCase k = GetParam();
  const tensor::ModelLayout four = testing::numbered_units({8, 8, 8, 40});
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
    run_ranks(2, [&](int rank, Communicator& comm) {
      auto pm = PartitionManager::create(four, rank, 2, 1);
      ASSERT_TRUE(pm.ok());
      ASSERT_EQ(pm->total_padded_numel(), 64);
      std::vector<float> acc(size_t(pm->total_shard_numel()), 0.0f);
      GradReducerOptions o;
      o.reduce_bucket_numel = k.bucket;
      o.comm_dtype = dt;
      auto r = drive(comm, *pm, acc, o, {0, 1, 2, 3}, 1, grad_value);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->bucket_capacity(), k.capacity);
      EXPECT_EQ(r->stats().reduces, k.reduces) << "bucket " << k.bucket;
      EXPECT_EQ(r->stats().split_units, k.split) << "bucket " << k.bucket;
      EXPECT_EQ(r->stats().reduced_bytes, 64 * int64_t(dtype_size(dt)));  // every element once, in the comm dtype
      for (int u = 0; u < 4; ++u)
        for (int64_t i = 0; i < pm->shard_numel(u); ++i)
          ASSERT_EQ(acc[size_t(pm->shard_offset(u) + i)], grad_value(0, 0, u, rank * pm->shard_numel(u) + i) +
                                                              grad_value(1, 0, u, rank * pm->shard_numel(u) + i))
              << "bucket " << k.bucket << " unit " << u << " i " << i;
    });
  }
}

// 1e9: one bucket (capped at the 32-element shard space). 24: u0-u2 fill it; u3 (20 per rank) goes out as 12 + 8.
// 20: u0 + u1, then u2 alone (u3 does not fit behind it), u3 as 10 + 10. 8: each small unit alone, u3 as 5 × 4.
INSTANTIATE_TEST_SUITE_P(Sizes, Buckets,
                         ::testing::Values(BucketCase{1000000000, 32, 1, 0}, BucketCase{24, 12, 3, 1},
                                           BucketCase{20, 10, 4, 1}, BucketCase{8, 4, 8, 1}),
                         [](const ::testing::TestParamInfo<BucketCase>& i) {
                           return "bucket" + std::to_string(i.param.bucket);
                         });

// Random gradients: |acc - Σ g| <= W·u·Σ|g|·(1 + W·u) per element (each input rounded once, each of the W - 1
// additions once; u = 2^-11 for f16, 2^-8 for bf16), plus 2^-24 · W for f16 subnormals. f32: 1e-6 · Σ|g|.
TEST(Reduce, SixteenBitSumsStayWithinTheRoundingBound) {
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32}) {
    for (int world : {2, 3, 4}) {
      const double u = dt == DataType::kFloat16 ? 0x1p-11 : dt == DataType::kBFloat16 ? 0x1p-8 : 1e-6 / world;
      auto value = [](int rank, int micro, int unit, int64_t i) {
        std::mt19937 rng(uint32_t(rank * 7919 + micro * 104729 + unit * 1299709 + i));
        return std::uniform_real_distribution<float>(-8.0f, 8.0f)(rng);
      };
      double worst = 0;
      std::mutex mu;
      run_ranks(world, [&](int rank, Communicator& comm) {
        auto pm = PartitionManager::create(units(), rank, world, 2);
        ASSERT_TRUE(pm.ok());
        std::vector<float> acc(size_t(pm->total_shard_numel()), 0.0f);
        GradReducerOptions o;
        o.comm_dtype = dt;
        o.reduce_bucket_numel = 30 * world;
        auto r = drive(comm, *pm, acc, o, {0, 1, 2}, 1, value);
        ASSERT_TRUE(r);
        for (int un = 0; un < pm->num_units(); ++un) {
          const int64_t S = pm->shard_numel(un);
          for (int64_t i = 0; i < S; ++i) {
            double sum = 0, abs = 0;
            for (int q = 0; q < world; ++q) {
              const double g = value(q, 0, un, rank * S + i);
              sum += g;
              abs += std::fabs(g);
            }
            const double d = std::fabs(acc[size_t(pm->shard_offset(un) + i)] - sum);
            const double bound = world * u * abs * (1 + world * u) + world * 0x1p-24;
            ASSERT_LE(d, bound) << dtype_name(dt) << " world " << world << " unit " << un;
            std::lock_guard<std::mutex> lock(mu);
            worst = std::max(worst, d / (world * u * abs));
          }
        }
      });
      std::printf("%s on %d ranks: largest error %.3f of the bound\n", dtype_name(dt), world, worst);
    }
  }
}

// 40000 per rank is finite in f16 (max 65504) but the sum of two is not: without pre-division the accumulator holds
// inf and the loss scaler's check sees it; pre-divided by the world size (DeepSpeed's default) the sum is exact.
TEST(Reduce, SixteenBitOverflowReachesTheAccumulator) {
  for (double predivide : {1.0, 2.0}) {
    run_ranks(2, [&](int rank, Communicator& comm) {
      auto pm = PartitionManager::create(units(), rank, 2, 2);
      ASSERT_TRUE(pm.ok());
      std::vector<float> acc(size_t(pm->total_shard_numel()), 0.0f);
      GradReducerOptions o;
      o.comm_dtype = DataType::kFloat16;
      o.predivide = predivide;
      auto r = drive(comm, *pm, acc, o, {0, 1, 2}, 1,
                     [](int, int, int unit, int64_t i) { return unit == 1 && i % 7 == 0 ? 40000.0f : 1.0f; });
      ASSERT_TRUE(r);
      const GradSpan span{acc.data(), acc.size(), DataType::kFloat32};
      auto overflow = global_overflow(comm, std::span<const GradSpan>(&span, 1));
      ASSERT_TRUE(overflow.ok()) << overflow.status().to_string();
      EXPECT_EQ(overflow.value(), predivide == 1.0) << "predivide " << predivide;
      if (predivide == 2.0) {
        const float* b = acc.data() + pm->shard_offset(1);
        const int64_t first = int64_t(rank) * pm->shard_numel(1);
        for (int64_t i = 0; i < pm->shard_numel(1); ++i)
          ASSERT_EQ(b[i], (first + i) % 7 == 0 ? 40000.0f : 1.0f) << "i " << i;
      }
    });
  }
}

TEST(Reduce, TooManyUnitsHoldingGradientsIsAClearError) {
  run_ranks(1, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units(), rank, 1, 1);
    ASSERT_TRUE(pm.ok());
    std::vector<float> acc(size_t(pm->total_shard_numel()), 0.0f);
    GradReducerOptions o;
    o.overlap_comm = false;
    auto r = GradReducer::create(comm, *pm, MemRef::host(acc.data(), acc.size() * 4), o);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ((*r)->pool_buffers(), 2);  // two units may hold gradients at once
    ASSERT_TRUE((*r)->grads(0).ok());
    ASSERT_TRUE((*r)->grads(1).ok());
    auto third = (*r)->grads(2);
    ASSERT_FALSE(third.ok());
    EXPECT_NE(third.status().message().find("call reduce() for finished units first"), std::string::npos)
        << third.status().to_string();
    ASSERT_TRUE((*r)->reduce(0).ok());  // packing gives the buffer back
    EXPECT_TRUE((*r)->grads(2).ok());
  });
}

TEST(Reduce, BadOptionsAreClearErrors) {
  run_ranks(1, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units(), rank, 1, 1);
    ASSERT_TRUE(pm.ok());
    std::vector<float> acc(size_t(pm->total_shard_numel()), 0.0f);
    GradReducerOptions o;
    o.comm_dtype = DataType::kInt32;
    auto r = GradReducer::create(comm, *pm, MemRef::host(acc.data(), acc.size() * 4), o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("use f32, f16 or bf16"), std::string::npos) << r.status().to_string();
    o.comm_dtype = DataType::kFloat16;
    o.predivide = 0;
    r = GradReducer::create(comm, *pm, MemRef::host(acc.data(), acc.size() * 4), o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("predivide"), std::string::npos) << r.status().to_string();
  });
}

}  // namespace
}  // namespace zw::zero
