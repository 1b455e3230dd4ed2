// tests/zero_engine/grad_reducer_test.cc — the gradient reducer, ranks as threads: over two micro steps the
// accumulator holds, for this rank's shard, the sum over ranks and micro steps of every unit's full gradient
// (rank-major slices), with and without overlap_comm; without overlap no reduce-scatter is left running when
// reduce() returns, with it at least one and no more than reduce_bucket_size allows; more units holding gradients than
// buffers is a clear error.
#include "zero/grad_reducer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "zero_engine/rank_threads.h"

namespace zw::zero {
namespace {

using testing::run_ranks;

std::vector<UnitSpec> units() {
  return {UnitSpec{"a", {ParamSpec{"a", {33}, true}}}, UnitSpec{"b", {ParamSpec{"b", {100}, true}}},
          UnitSpec{"c", {ParamSpec{"c", {7}, true}}}};
}

// Exact in any summation order: small integers.
float grad_value(int rank, int micro, int unit, int64_t i) {
  return float((rank + 1) * (micro + 2) + unit * 3 + i % 5);
}

class Reduce : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(Reduce, AccumulatesTheSumOverRanksAndMicroSteps) {
  const auto [world, overlap] = GetParam();
  run_ranks(world, [&, world = world, overlap = overlap](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units(), rank, world, 2);
    ASSERT_TRUE(pm.ok());
    std::vector<float> acc(size_t(pm->total_shard_numel()), 0.0f);
    GradReducerOptions o;
    o.overlap_comm = overlap;
    o.reduce_bucket_numel = 2 * pm->max_padded_numel();
    auto r = GradReducer::create(comm, *pm, MemRef::host(acc.data(), acc.size() * 4), o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (int micro = 0; micro < 2; ++micro) {
      for (int u : {2, 0, 1}) {
        auto g = (*r)->grads(u);
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        float* p = reinterpret_cast<float*>(g->data());
        for (int64_t i = 0; i < pm->unit(u).padded_numel; ++i) {
          ASSERT_EQ(p[i], 0.0f);  // zeroed for the model to accumulate into
          p[i] = grad_value(rank, micro, u, i);
        }
        ASSERT_TRUE((*r)->reduce(u).ok());
      }
      ASSERT_TRUE((*r)->flush().ok());
    }
    for (int u = 0; u < pm->num_units(); ++u) {
      const int64_t S = pm->shard_numel(u);
      for (int64_t i = 0; i < S; ++i) {
        float want = 0;
        for (int q = 0; q < world; ++q)
          for (int micro = 0; micro < 2; ++micro) want += grad_value(q, micro, u, int64_t(rank) * S + i);
        ASSERT_EQ(acc[size_t(pm->shard_offset(u) + i)], want) << "rank " << rank << " unit " << u << " i " << i;
      }
    }
    const GradReducerStats& st = (*r)->stats();
    EXPECT_EQ(st.reduces, 6);
    if (overlap) {
      EXPECT_GE(st.max_in_flight, 1);  // each reduce-scatter is left running when reduce() returns
      EXPECT_LE(st.max_in_flight, 2);  // reduce_bucket_size = two of the largest unit
    } else {
      EXPECT_EQ(st.max_in_flight, 0);  // waited for inside reduce()
      EXPECT_EQ(st.overlapped, 0);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldsAndOverlap, Reduce,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()));

TEST(Reduce, TooManyUnitsHoldingGradientsIsAClearError) {
  run_ranks(1, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units(), rank, 1, 1);
    ASSERT_TRUE(pm.ok());
    std::vector<float> acc(size_t(pm->total_shard_numel()), 0.0f);
    GradReducerOptions o;
    o.overlap_comm = false;  // 2 buffers: two units may hold gradients at once
    auto r = GradReducer::create(comm, *pm, MemRef::host(acc.data(), acc.size() * 4), o);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ((*r)->pool_buffers(), 2);
    ASSERT_TRUE((*r)->grads(0).ok());
    ASSERT_TRUE((*r)->grads(1).ok());
    auto third = (*r)->grads(2);
    ASSERT_FALSE(third.ok());
    EXPECT_NE(third.status().message().find("call reduce() for finished units first"), std::string::npos)
        << third.status().to_string();
  });
}

}  // namespace
}  // namespace zw::zero
