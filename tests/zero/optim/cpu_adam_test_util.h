// tests/zero/optim/cpu_adam_test_util.h — shared fixtures of the CPU Adam tests: deterministic inputs and
// bit-level comparison helpers.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "zero/optim/cpu_adam.h"

namespace zw::zero::testing {

// One optimizer's full state plus copy-out buffers, poisoned outputs.
struct AdamState {
  std::vector<float> master, m, v, grad;
  std::vector<uint16_t> bf16, f16;

  static AdamState random(size_t n, uint32_t seed) {
    AdamState s;
    std::mt19937 rng(seed);
    std::normal_distribution<float> w(0.0f, 0.5f), g(0.0f, 1e-2f);
    std::uniform_real_distribution<float> vv(0.0f, 1e-4f);
    s.master.resize(n);
    s.m.resize(n);
    s.v.resize(n);
    s.grad.resize(n);
    for (size_t i = 0; i < n; ++i) {
      s.master[i] = w(rng);
      s.m[i] = g(rng) * 0.1f;
      s.v[i] = vv(rng);
      s.grad[i] = g(rng);
    }
    s.bf16.assign(n, 0xdead);
    s.f16.assign(n, 0xbeef);
    return s;
  }

  Status step(kernels::Isa isa, const AdamParams& p, int t, ThreadPool* pool = nullptr, bool copy_out = true) {
    return adam_step_isa(isa, p, master.data(), m.data(), v.data(), grad.data(), master.size(),
                         copy_out ? bf16.data() : nullptr, copy_out ? f16.data() : nullptr, t, pool);
  }
};

// Index of the first element whose bits differ, or -1.
template <class T>
inline long first_bit_diff(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long>(i);
  return -1;
}

inline void expect_same_bits(const AdamState& a, const AdamState& b, bool copy_out) {
  EXPECT_EQ(first_bit_diff(a.master, b.master), -1) << "master";
  EXPECT_EQ(first_bit_diff(a.m, b.m), -1) << "m";
  EXPECT_EQ(first_bit_diff(a.v, b.v), -1) << "v";
  if (copy_out) {
    EXPECT_EQ(first_bit_diff(a.bf16, b.bf16), -1) << "bf16";
    EXPECT_EQ(first_bit_diff(a.f16, b.f16), -1) << "f16";
  }
}

}  // namespace zw::zero::testing
