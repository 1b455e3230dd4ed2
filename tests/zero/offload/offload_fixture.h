// tests/zero/offload/offload_fixture.h — random optimizer shards and the host reference for the offload pipeline
// tests (offload_pipeline_test.cc with a host stand-in for the GPU, offload_pipeline_gpu_test.cc on a real one).
//
// A case is a shard of n elements with random master/m/v (v >= 0) and gradient, cut into decay ranges of random
// length that alternate weight decay and leave small random gaps (padding, which must stay untouched). The
// reference runs the pipeline's fused host path on copies: host f32 gradient (a 16-bit gradient widened exactly)
// and host 16-bit weights. Non-goals: timing.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/element.h"
#include "zero/offload/offload_pipeline.h"

namespace zw::zero::testing {

struct OffloadCase {
  int64_t n = 0;
  std::vector<float> master, m, v;
  std::vector<float> grad32;     // the gradient as f32 (exactly the widened 16-bit one when grad is 16-bit)
  std::vector<uint16_t> grad16;  // the 16-bit gradient (empty for f32)
  DataType grad_dtype = DataType::kFloat32;
  std::vector<DecayRange> ranges;

  static OffloadCase random(int64_t n, DataType grad_dtype, uint32_t seed) {
    OffloadCase c;
    c.n = n;
    c.grad_dtype = grad_dtype;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    c.master.resize(size_t(n));
    c.m.resize(size_t(n));
    c.v.resize(size_t(n));
    c.grad32.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      c.master[size_t(i)] = u(rng);
      c.m[size_t(i)] = u(rng) * 1e-2f;
      c.v[size_t(i)] = std::abs(u(rng)) * 1e-4f;
      c.grad32[size_t(i)] = u(rng) * 4.0f;
    }
    if (grad_dtype != DataType::kFloat32) {
      c.grad16.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        const float g = c.grad32[size_t(i)];
        const bool bf = grad_dtype == DataType::kBFloat16;
        c.grad16[size_t(i)] = bf ? kernels::f32_to_bf16(g) : kernels::f32_to_f16(g);
        c.grad32[size_t(i)] = bf ? kernels::bf16_to_f32(c.grad16[size_t(i)]) : kernels::f16_to_f32(c.grad16[size_t(i)]);
      }
    }
    // Ranges of 1 .. 2·n/64 elements, alternating decay, each followed by a gap of 0..8 elements half the time.
    std::uniform_int_distribution<int64_t> len(1, std::max<int64_t>(1, n / 32));
    std::uniform_int_distribution<int64_t> gap(0, 8);
    bool decay = true;
    for (int64_t at = gap(rng); at < n;) {
      const int64_t k = std::min(n - at, len(rng));
      c.ranges.push_back(DecayRange{at, k, decay});
      decay = !decay;
      at += k + (rng() % 2 ? gap(rng) : 0);
    }
    return c;
  }

  size_t elems_in_ranges() const {
    size_t s = 0;
    for (const DecayRange& r : ranges) s += size_t(r.numel);
    return s;
  }
};

inline AdamParams offload_params() {
  AdamParams p;
  p.lr = 3e-3f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  return p;
}

// Host state a pipeline updates in place.
struct HostState {
  std::vector<float> master, m, v;
  std::vector<uint16_t> w16;
  explicit HostState(const OffloadCase& c, uint16_t poison)
      : master(c.master), m(c.m), v(c.v), w16(size_t(c.n), poison) {}
  OptimizerShard shard(int64_t n) {
    OptimizerShard s;
    s.numel = n;
    s.master = master.data();
    s.m = m.data();
    s.v = v.data();
    return s;
  }
};

// `steps` reference steps on the fused host path into `ref` (w16 poisoned with `poison` first).
inline void run_reference(const OffloadCase& c, DataType w_dtype, int steps, HostState& ref) {
  OffloadPipelineOptions o;
  auto pipe = OffloadPipeline::create(o);
  ASSERT_TRUE(pipe.ok()) << pipe.status().to_string();
  for (int t = 1; t <= steps; ++t) {
    OptimizerShard s = ref.shard(c.n);
    s.grad = MemRef::host(c.grad32.data(), c.grad32.size() * 4);
    s.weights_dtype = w_dtype;
    s.weights16 = MemRef::host(ref.w16.data(), ref.w16.size() * 2);
    const Status st = (*pipe)->step(offload_params(), t, s, c.ranges, c.n);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
}

// The first element where two arrays differ in their bits, or -1.
template <class T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return int64_t(i);
  return -1;
}

#define EXPECT_SAME_BITS(a, b) EXPECT_EQ(first_difference(a, b), -1) << #a " differs from " #b

}  // namespace zw::zero::testing
