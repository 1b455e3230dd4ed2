// tests/zero/offload/offload_pipeline_test.cc — the offload pipeline's tiled path without a GPU: a lazy host copier
// stands in for CUDA, and "device" buffers are host vectors marked MemKind::kCudaDevice (only the copier touches
// them).
//
// The lazy copier runs a copy only when the pipeline waits for its slot (or synchronizes): a copy down the pipeline
// read before waiting leaves stale data in the staging tile, and a staging tile rewritten before its copy up was
// waited for carries the wrong values up, so a missing wait shows as a bit difference, deterministically. Every case
// compares master, m, v and the 16-bit weights with the fused host path bit for bit, checks that padding between
// decay ranges is untouched, and runs two steps (slots reused across step() calls). Also: argument checks, a copy
// failure mid-step, and the fused path's sub-group count.
#include "zero/offload/offload_pipeline.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "tests/zero/offload/offload_fixture.h"

namespace zw::zero::testing {
namespace {

class LazyCopier final : public TileCopier {
 public:
  struct Counters {
    int begins = 0, ends = 0;
    size_t down_bytes = 0, up_bytes = 0;
    int ups = 0;          // copy_up calls so far
    int fail_up_at = -1;  // copy_up number that fails (-1: none)
  };
  explicit LazyCopier(Counters* counters) : counters_(counters) {}
  Result<void*> alloc_staging(size_t bytes) override {
    blocks_.push_back(std::make_unique<std::byte[]>(bytes));
    std::memset(blocks_.back().get(), 0xA5, bytes);  // garbage until copied
    return static_cast<void*>(blocks_.back().get());
  }
  void free_staging(void* p) override {}
  Status begin() override {
    ++counters_->begins;
    return Status();
  }
  Status copy_down(int slot, void* dst, const void* src, size_t bytes) override {
    counters_->down_bytes += bytes;
    down_[size_t(slot)].push_back([=] { std::memcpy(dst, src, bytes); });
    return Status();
  }
  Status wait_down(int slot) override { return run(down_[size_t(slot)]); }
  Status copy_up(int slot, void* dst, const void* src, size_t bytes) override {
    if (counters_->ups++ == counters_->fail_up_at) return Status(Code::kSystem, "injected copy failure");
    counters_->up_bytes += bytes;
    up_[size_t(slot)].push_back([=] { std::memcpy(dst, src, bytes); });
    return Status();
  }
  Status wait_up(int slot) override { return run(up_[size_t(slot)]); }
  Status end() override {
    ++counters_->ends;
    return Status();
  }
  Status synchronize() override {
    for (auto& q : down_) ZW_TRY(run(q));
    for (auto& q : up_) ZW_TRY(run(q));
    return Status();
  }

 private:
  static Status run(std::vector<std::function<void()>>& q) {
    for (auto& f : q) f();
    q.clear();
    return Status();
  }
  Counters* counters_;
  std::vector<std::unique_ptr<std::byte[]>> blocks_;
  std::vector<std::function<void()>> down_[4], up_[4];
};

constexpr uint16_t kPoison = 0x7e11;

// grad dtype, weights dtype (f32: none), weights on the "device", buffers, serialize
using Case = std::tuple<DataType, DataType, bool, int, bool>;

class OffloadPipelineTiled : public ::testing::TestWithParam<Case> {};

TEST_P(OffloadPipelineTiled, MatchesFusedHostPath) {
  const auto [grad_dtype, w_dtype, w_on_device, buffers, serialize] = GetParam();
  const int64_t n = (int64_t{1} << 20) + 12345;
  const OffloadCase c = OffloadCase::random(n, grad_dtype, 11);
  HostState ref(c, kPoison), got(c, kPoison);
  run_reference(c, w_dtype, 2, ref);
  std::vector<uint16_t> grad16 = c.grad16;
  std::vector<float> grad32 = c.grad32;
  LazyCopier::Counters counters;
  OffloadPipelineOptions o;
  o.tile_elems = (int64_t{1} << 16) + 3;
  o.buffers = buffers;
  o.serialize = serialize;
  auto threads = ThreadPool::create(3);
  ASSERT_TRUE(threads.ok());
  o.threads = threads->get();
  auto pipe = OffloadPipeline::create_with_copier(o, std::make_unique<LazyCopier>(&counters));
  ASSERT_TRUE(pipe.ok()) << pipe.status().to_string();
  for (int t = 1; t <= 2; ++t) {
    OptimizerShard s = got.shard(n);
    s.grad_dtype = grad_dtype;
    s.grad = grad_dtype == DataType::kFloat32 ? MemRef::host(grad32.data(), grad32.size() * 4)
                                              : MemRef::host(grad16.data(), grad16.size() * 2);
    s.grad.kind = MemKind::kCudaDevice;
    s.grad.device = 0;
    s.weights_dtype = w_dtype;
    s.weights16 = MemRef::host(got.w16.data(), got.w16.size() * 2);
    if (w_on_device) s.weights16 = MemRef{got.w16.data(), got.w16.size() * 2, MemKind::kCudaDevice, 0};
    const Status st = (*pipe)->step(offload_params(), t, s, c.ranges, (int64_t{1} << 18) + 7);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ((*pipe)->last_stats().sub_groups, (n + (1 << 18) + 6) / ((1 << 18) + 7));
    EXPECT_GT((*pipe)->last_stats().tiles, 16);
    EXPECT_EQ((*pipe)->last_stats().bytes_down, c.elems_in_ranges() * dtype_size(grad_dtype));
    const bool up = w_on_device && w_dtype != DataType::kFloat32;
    EXPECT_EQ((*pipe)->last_stats().bytes_up, up ? c.elems_in_ranges() * 2 : 0);
  }
  ASSERT_TRUE((*pipe)->synchronize().ok());
  EXPECT_EQ(counters.begins, 2);
  EXPECT_EQ(counters.ends, 2);
  EXPECT_SAME_BITS(got.master, ref.master);
  EXPECT_SAME_BITS(got.m, ref.m);
  EXPECT_SAME_BITS(got.v, ref.v);
  EXPECT_SAME_BITS(got.w16, ref.w16);  // includes the padding: still kPoison in both
  EXPECT_EQ(got.w16[0] == kPoison, c.ranges.front().begin > 0 || w_dtype == DataType::kFloat32);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [g, w, dev, b, ser] = info.param;
  std::string s = std::string("grad_") + dtype_name(g) + "_w_" + (w == DataType::kFloat32 ? "none" : dtype_name(w)) +
                  (dev ? "_dev" : "_host") + "_buf" + std::to_string(b) + (ser ? "_serial" : "");
  return s;
}

INSTANTIATE_TEST_SUITE_P(Cases, OffloadPipelineTiled,
                         ::testing::Values(Case{DataType::kFloat32, DataType::kBFloat16, true, 2, false},
                                           Case{DataType::kBFloat16, DataType::kBFloat16, true, 2, false},
                                           Case{DataType::kFloat16, DataType::kFloat16, true, 2, false},
                                           Case{DataType::kBFloat16, DataType::kBFloat16, true, 3, false},
                                           Case{DataType::kFloat16, DataType::kBFloat16, true, 1, false},
                                           Case{DataType::kBFloat16, DataType::kFloat16, true, 2, true},
                                           Case{DataType::kBFloat16, DataType::kBFloat16, false, 2, false},
                                           Case{DataType::kFloat32, DataType::kFloat32, false, 3, false}),
                         case_name);

// Host 16-bit weights with a host f32 gradient never need a copier: the fused path, no tiles.
TEST(OffloadPipeline, HostBuffersTakeTheFusedPath) {
  const OffloadCase c = OffloadCase::random(5000, DataType::kFloat32, 3);
  HostState ref(c, kPoison);
  run_reference(c, DataType::kBFloat16, 1, ref);
  auto pipe = OffloadPipeline::create(OffloadPipelineOptions{});
  ASSERT_TRUE(pipe.ok());
  HostState got(c, kPoison);
  OptimizerShard s = got.shard(c.n);
  s.grad = MemRef::host(c.grad32.data(), c.grad32.size() * 4);
  s.weights_dtype = DataType::kBFloat16;
  s.weights16 = MemRef::host(got.w16.data(), got.w16.size() * 2);
  ASSERT_TRUE((*pipe)->step(offload_params(), 1, s, c.ranges, 999).ok());
  EXPECT_EQ((*pipe)->last_stats().sub_groups, 6);
  EXPECT_EQ((*pipe)->last_stats().tiles, 0);
  EXPECT_SAME_BITS(got.master, ref.master);
  EXPECT_SAME_BITS(got.w16, ref.w16);
}

// A copy that fails mid-step fails the step, and the compute stream is still ordered after the issued copies.
TEST(OffloadPipeline, CopyFailureEndsTheStep) {
  const OffloadCase c = OffloadCase::random(100'000, DataType::kBFloat16, 9);
  HostState got(c, kPoison);
  std::vector<uint16_t> g16 = c.grad16, w16(size_t(c.n));
  LazyCopier::Counters counters;
  counters.fail_up_at = 5;
  OffloadPipelineOptions o;
  o.tile_elems = 4099;
  auto pipe = OffloadPipeline::create_with_copier(o, std::make_unique<LazyCopier>(&counters));
  ASSERT_TRUE(pipe.ok());
  OptimizerShard s = got.shard(c.n);
  s.grad = MemRef{g16.data(), g16.size() * 2, MemKind::kCudaDevice, 0};
  s.grad_dtype = DataType::kBFloat16;
  s.weights16 = MemRef{w16.data(), w16.size() * 2, MemKind::kCudaDevice, 0};
  s.weights_dtype = DataType::kBFloat16;
  const Status st = (*pipe)->step(offload_params(), 1, s, c.ranges, c.n);
  EXPECT_EQ(st.code(), Code::kSystem) << st.to_string();
  EXPECT_EQ(counters.begins, 1);
  EXPECT_EQ(counters.ends, 1);
}

TEST(OffloadPipeline, RefusesBadArguments) {
  const OffloadCase c = OffloadCase::random(1000, DataType::kBFloat16, 5);
  HostState st(c, 0);
  std::vector<uint16_t> g16 = c.grad16;
  auto pipe = OffloadPipeline::create(OffloadPipelineOptions{});
  ASSERT_TRUE(pipe.ok());
  OptimizerShard s = st.shard(c.n);
  s.grad = MemRef::host(g16.data(), g16.size() * 2);
  s.grad_dtype = DataType::kBFloat16;
  Status r = (*pipe)->step(offload_params(), 1, s, c.ranges, 100);
  EXPECT_EQ(r.code(), Code::kInvalidArgument) << r.to_string();  // 16-bit gradient in host memory
  s.grad = MemRef::host(c.grad32.data(), 10);
  s.grad_dtype = DataType::kFloat32;
  EXPECT_EQ((*pipe)->step(offload_params(), 1, s, c.ranges, 100).code(), Code::kInvalidArgument);  // too small
  s.grad = MemRef::host(c.grad32.data(), c.grad32.size() * 4);
  std::vector<DecayRange> unsorted{{500, 10, true}, {100, 10, false}};
  EXPECT_EQ((*pipe)->step(offload_params(), 1, s, unsorted, 100).code(), Code::kInvalidArgument);
  EXPECT_EQ((*pipe)->step(offload_params(), 0, s, c.ranges, 100).code(), Code::kInvalidArgument);  // step 0
  EXPECT_EQ((*pipe)->step(offload_params(), 1, s, c.ranges, 0).code(), Code::kInvalidArgument);
  OffloadPipelineOptions bad;
  bad.buffers = 5;
  EXPECT_FALSE(OffloadPipeline::create(bad).ok());
}

}  // namespace
}  // namespace zw::zero::testing
