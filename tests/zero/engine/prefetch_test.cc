// tests/zero/engine/prefetch_test.cc — the prefetch scheduler, ranks as threads: gathered units hold every rank's shard
// in rank-major order (f32, f16, bf16 gathers; over shm into a zw::mem_alloc pool); the order fingerprint catches ranks
// that declare or record different orders and names them; prefetches are issued before use (counters and positions, not
// speed); a unit is released after forward and gathered again for backward, unless stage3_max_reuse_distance keeps it
// (counted in elements, capped by the pool); a use out of order is an error.
#include "zero/engine/prefetch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "tensor/tensor.h"
#include "tests/zero/engine/layout_util.h"
#include "tests/zero/engine/rank_threads.h"

namespace zw::zero {
namespace {

using testing::run_ranks;

tensor::ModelLayout units(const std::vector<int64_t>& sizes) { return testing::numbered_units(sizes); }

// Small integers: exact in f16 and bf16.
float value_of(int unit, int64_t index) { return float((unit * 37 + index * 5) % 97 - 48); }

// This rank's shard space in `dtype`, from value_of.
std::vector<uint8_t> make_source(const PartitionManager& pm, DataType dtype) {
  const int64_t n = pm.total_shard_numel();
  std::vector<float> f(size_t(n), 0.0f);
  for (int u = 0; u < pm.num_units(); ++u) {
    const int64_t S = pm.shard_numel(u);
    for (int64_t i = 0; i < S; ++i) f[size_t(pm.shard_offset(u) + i)] = value_of(u, int64_t(pm.rank()) * S + i);
  }
  std::vector<uint8_t> out(size_t(n) * dtype_size(dtype));
  const tensor::Shape shape{n};
  EXPECT_TRUE(tensor::convert(tensor::Tensor{MemRef::host(f.data(), f.size() * 4), DataType::kFloat32, shape},
                              tensor::Tensor{MemRef::host(out.data(), out.size()), dtype, shape})
                  .ok());
  return out;
}

class GatherTest : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(GatherTest, UnitsHoldEveryRanksShardRankMajor) {
  const auto [world, dtype] = GetParam();
  run_ranks(world, [&, world = world, dtype = dtype](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units({1, 37, 100, 5}), rank, world, 4);
    ASSERT_TRUE(pm.ok());
    std::vector<uint8_t> src = make_source(*pm, dtype);
    PrefetchOptions o;
    o.gather_dtype = dtype;
    o.persistence_threshold = 5;  // units 0 and 3 persist
    auto s = PrefetchScheduler::create(comm, *pm, MemRef::host(src.data(), src.size()), o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    // Over shm the pool peers gather into comes from zw::mem_alloc, so their writes are mapped copies.
    EXPECT_EQ((*s)->pool_peer_mappable(), std::strcmp(comm.transport_name(), "shm") == 0);
    EXPECT_TRUE((*s)->persistent(0) && (*s)->persistent(3) && !(*s)->persistent(1));
    ASSERT_TRUE((*s)->begin_pass(false).ok());
    for (int u : {2, 0, 1, 3, 2}) {
      auto view = (*s)->acquire(u);
      ASSERT_TRUE(view.ok()) << view.status().to_string();
      const float* v = reinterpret_cast<const float*>(view->data());
      for (int64_t i = 0; i < pm->unit(u).padded_numel; ++i)
        ASSERT_EQ(v[i], value_of(u, i)) << "rank " << rank << " unit " << u << " element " << i;
      ASSERT_TRUE((*s)->release(u).ok());
    }
    ASSERT_TRUE((*s)->end_pass().ok());
  });
}

INSTANTIATE_TEST_SUITE_P(WorldsAndDtypes, GatherTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DataType::kFloat32, DataType::kFloat16,
                                                              DataType::kBFloat16)));

TEST(Fingerprint, DeclaredOrdersThatDifferNameTheRanks) {
  std::vector<std::string> errors(3);
  run_ranks(3, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units({64, 64, 64}), rank, 3, 1);
    ASSERT_TRUE(pm.ok());
    std::vector<uint8_t> src = make_source(*pm, DataType::kFloat32);
    auto s = PrefetchScheduler::create(comm, *pm, MemRef::host(src.data(), src.size()), PrefetchOptions{});
    ASSERT_TRUE(s.ok());
    const Status st = (*s)->declare_order(rank == 1 ? std::vector<int>{0, 2, 1} : std::vector<int>{0, 1, 2});
    EXPECT_EQ(st.code(), Code::kDesync) << st.to_string();
    errors[rank] = st.message();
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("ranks 0,2 have order fingerprint"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1 have order fingerprint"), std::string::npos) << e;
  }
}

TEST(Fingerprint, RecordedOrdersThatDifferFailAtTheEndOfTheFirstPass) {
  std::atomic<int> desyncs{0};
  run_ranks(2, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units({64, 64}), rank, 2, 1);  // same sizes: the gathers themselves match
    ASSERT_TRUE(pm.ok());
    std::vector<uint8_t> src = make_source(*pm, DataType::kFloat32);
    PrefetchOptions o;
    o.persistence_threshold = 0;
    auto s = PrefetchScheduler::create(comm, *pm, MemRef::host(src.data(), src.size()), o);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->begin_pass(true).ok());
    for (int u : rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0}) {
      ASSERT_TRUE((*s)->acquire(u).ok());
      ASSERT_TRUE((*s)->release(u).ok());
    }
    const Status st = (*s)->end_pass();
    if (st.code() == Code::kDesync) ++desyncs;
    EXPECT_NE(st.message().find("rank 0 have order fingerprint"), std::string::npos) << st.to_string();
  });
  EXPECT_EQ(desyncs.load(), 2);
}

TEST(Fingerprint, EqualOrdersPassAndAgree) {
  std::vector<uint64_t> prints(2);
  run_ranks(2, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units({64, 30}), rank, 2, 1);
    ASSERT_TRUE(pm.ok());
    std::vector<uint8_t> src = make_source(*pm, DataType::kFloat32);
    auto s = PrefetchScheduler::create(comm, *pm, MemRef::host(src.data(), src.size()), PrefetchOptions{});
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->declare_order({0, 1, 1, 0}).ok());
    prints[rank] = (*s)->fingerprint();
  });
  EXPECT_EQ(prints[0], prints[1]);
  EXPECT_NE(prints[0], 0u);
}

// A forward/backward-shaped order over 6 equal units with 3 gather buffers, prefetched with a bucket of 2 units and
// with one of half a unit: DeepSpeed adds to a prefetch while fewer than stage3_prefetch_bucket_size elements are on
// the way, so a bucket smaller than a unit still prefetches the next unit at every use; it does not turn prefetching
// off.
class PrefetchBucket : public ::testing::TestWithParam<int64_t> {};  // the bucket, in hundredths of a unit

TEST_P(PrefetchBucket, IssuedBeforeUseAndRegatheredForBackward) {
  const std::vector<int> order = {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
  run_ranks(2, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units({100, 100, 100, 100, 100, 100}), rank, 2, 2);
    ASSERT_TRUE(pm.ok());
    std::vector<uint8_t> src = make_source(*pm, DataType::kFloat32);
    PrefetchOptions o;
    o.persistence_threshold = 0;
    o.max_live_numel = 3 * pm->max_padded_numel();
    o.prefetch_bucket_numel = GetParam() * pm->max_padded_numel() / 100;
    auto s = PrefetchScheduler::create(comm, *pm, MemRef::host(src.data(), src.size()), o);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->pool_buffers(), 3);
    ASSERT_TRUE((*s)->declare_order(order).ok());
    for (int pass = 0; pass < 2; ++pass) {
      ASSERT_TRUE((*s)->begin_pass(true).ok());
      for (size_t p = 0; p < order.size(); ++p) {
        auto view = (*s)->acquire(order[p]);
        ASSERT_TRUE(view.ok()) << view.status().to_string();
        ASSERT_EQ(reinterpret_cast<const float*>(view->data())[7], value_of(order[p], 7));
        ASSERT_TRUE((*s)->release(order[p]).ok());
      }
      ASSERT_TRUE((*s)->end_pass().ok());
      std::vector<int> gathers(6, 0);
      for (const GatherEvent& e : (*s)->last_pass_events()) {
        ++gathers[e.unit];
        ASSERT_GE(e.use_position, 0) << "a gather that was never used: unit " << e.unit;
        if (e.use_position == 0) continue;  // nothing runs before the first use
        EXPECT_TRUE(e.prefetched) << "unit " << e.unit << " used at " << e.use_position;
        EXPECT_LT(e.issue_position, e.use_position) << "unit " << e.unit;
        EXPECT_GT(e.ready_ns, e.issue_ns);
      }
      // Units 0..4 are released after forward and gathered again for backward; unit 5 is used twice in a row.
      EXPECT_EQ(gathers, (std::vector<int>{2, 2, 2, 2, 2, 1})) << "pass " << pass;
    }
    EXPECT_EQ((*s)->stats().on_demand, 2);  // the first use of each pass
    EXPECT_EQ((*s)->stats().evicted, 0);
  });
}

INSTANTIATE_TEST_SUITE_P(Prefetch, PrefetchBucket, ::testing::Values(200, 50));

// Runs `passes` scheduled passes of `order` over units of 100 elements (world 2) and returns the scheduler's stats.
PrefetchStats run_order(const std::vector<int>& order, int buffers, int64_t reuse, int passes = 2) {
  std::vector<PrefetchStats> stats(2);
  run_ranks(2, [&](int rank, Communicator& comm) {
    const int n = *std::max_element(order.begin(), order.end()) + 1;
    auto pm = PartitionManager::create(units(std::vector<int64_t>(size_t(n), 100)), rank, 2, 2);
    ASSERT_TRUE(pm.ok());
    std::vector<uint8_t> src = make_source(*pm, DataType::kFloat32);
    PrefetchOptions o;
    o.persistence_threshold = 0;
    o.max_live_numel = buffers * pm->max_padded_numel();
    o.max_reuse_numel = reuse;
    auto s = PrefetchScheduler::create(comm, *pm, MemRef::host(src.data(), src.size()), o);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ((*s)->pool_buffers(), buffers);
    ASSERT_TRUE((*s)->declare_order(order).ok());
    for (int pass = 0; pass < passes; ++pass) {
      ASSERT_TRUE((*s)->begin_pass(true).ok());
      for (int u : order) {
        auto view = (*s)->acquire(u);
        ASSERT_TRUE(view.ok()) << view.status().to_string();
        ASSERT_EQ(reinterpret_cast<const float*>(view->data())[7], value_of(u, 7));
        ASSERT_TRUE((*s)->release(u).ok());
      }
      ASSERT_TRUE((*s)->end_pass().ok());
    }
    stats[rank] = (*s)->stats();
  });
  EXPECT_EQ(stats[0].gathers, stats[1].gathers);
  return stats[0];
}

// stage3_max_reuse_distance, DeepSpeed's rule: after a use, the uses from the next one on are walked, summing their
// elements, until the sum reaches the distance; a unit met on the walk stays gathered until that use.
TEST(Reuse, UnitUsedAgainWithinTheDistanceStaysGathered) {
  const std::vector<int> order = {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
  const PrefetchStats none = run_order(order, 3, 0);
  EXPECT_EQ(none.gathers, 2 * 12);  // distance 0: every use gathers
  EXPECT_EQ(none.kept_for_reuse, 0);
  const PrefetchStats far = run_order(order, 3, 1000000000);
  EXPECT_EQ(far.gathers, 2 * 11);  // unit 5 stays for its second use (4 then needs 2 more uses: over the pool)
  EXPECT_EQ(far.kept_for_reuse, 2);
}

TEST(Reuse, DistanceCountsTheElementsOfTheUsesInBetween) {
  // Unit 0 is released at use 0; before its next use comes unit 1 (100 elements). (A trailing unit lets the pool
  // have 3 buffers: it holds at most as many as there are units.)
  EXPECT_EQ(run_order({0, 1, 0, 2}, 3, 100, 1).gathers, 4);  // the walk stops after 100 elements: released
  EXPECT_EQ(run_order({0, 1, 0, 2}, 3, 101, 1).gathers, 3);  // 100 < 101: the walk reaches the reuse, kept
  EXPECT_EQ(run_order({0, 1, 2, 0, 3}, 4, 200, 1).gathers, 5);
  EXPECT_EQ(run_order({0, 1, 2, 0, 3}, 4, 201, 1).gathers, 4);
}

TEST(Reuse, LiveParameterPoolStaysTheCap) {
  // Within any distance, but with 2 buffers unit 1 needs the one unit 0 would keep: released as before.
  const PrefetchStats two = run_order({0, 1, 0, 2}, 2, 1000000000, 1);
  EXPECT_EQ(two.gathers, 4);
  EXPECT_EQ(two.kept_for_reuse, 0);
  EXPECT_EQ(two.evicted, 0);
  EXPECT_EQ(run_order({0, 1, 0, 2}, 3, 1000000000, 1).gathers, 3);
}

TEST(Prefetch, UseOutOfOrderIsAnError) {
  run_ranks(1, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units({10, 10}), rank, 1, 1);
    ASSERT_TRUE(pm.ok());
    std::vector<uint8_t> src = make_source(*pm, DataType::kFloat32);
    auto s = PrefetchScheduler::create(comm, *pm, MemRef::host(src.data(), src.size()), PrefetchOptions{});
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->declare_order({0, 1}).ok());
    ASSERT_TRUE((*s)->begin_pass(true).ok());
    auto wrong = (*s)->acquire(1);
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.status().message().find("the recorded order has u0"), std::string::npos)
        << wrong.status().to_string();
  });
}

// Rounding an f32 source at each gather is a device feature (zero/engine/prefetch.h): asked of a host scheduler, or
// with an f32 gather dtype, it is refused with what was given.
TEST(Prefetch, RoundSourceNeedsADeviceAnd16BitGathers) {
  run_ranks(1, [&](int rank, Communicator& comm) {
    auto pm = PartitionManager::create(units({10, 10}), rank, 1, 1);
    ASSERT_TRUE(pm.ok());
    std::vector<uint8_t> src = make_source(*pm, DataType::kFloat32);
    for (DataType d : {DataType::kBFloat16, DataType::kFloat32}) {
      PrefetchOptions o;
      o.gather_dtype = d;
      o.round_source = true;
      auto s = PrefetchScheduler::create(comm, *pm, MemRef::host(src.data(), src.size()), o);
      ASSERT_FALSE(s.ok()) << dtype_name(d);
      EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
      EXPECT_NE(s.status().message().find("round_source needs an f32 shard space in device memory"), std::string::npos)
          << s.status().to_string();
      EXPECT_NE(s.status().message().find(std::string("gather dtype ") + dtype_name(d)), std::string::npos)
          << s.status().to_string();
    }
  });
}

}  // namespace
}  // namespace zw::zero
