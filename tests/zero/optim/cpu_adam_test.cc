// tests/zero/optim/cpu_adam_test.cc — bit-exactness of the CPU Adam kernel across ISAs, tile splits and threads,
// copy-out against element.h, weight-decay selection and argument checks.
#include <cmath>
#include <string>
#include <tuple>

#include "cpu_adam_test_util.h"
#include "kernels/element.h"

namespace zw::zero::testing {
namespace {

using kernels::Isa;

enum class Mode { kAdamW, kAdamWNoDecay, kAdamL2, kAdamScaled };

AdamParams params_for(Mode mode) {
  AdamParams p;
  p.lr = 3e-4f;
  p.weight_decay = 0.1f;
  switch (mode) {
    case Mode::kAdamW:
      break;
    case Mode::kAdamWNoDecay:
      p.weight_decay = 0.0f;
      break;
    case Mode::kAdamL2:
      p.adam_w_mode = false;
      break;
    case Mode::kAdamScaled:
      p.grad_scale = 0.7f / 1024.0f;  // 1/loss_scale × clip coefficient
      p.lr = 1e-2f;
      break;
  }
  return p;
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kAdamW:
      return "AdamW";
    case Mode::kAdamWNoDecay:
      return "AdamWNoDecay";
    case Mode::kAdamL2:
      return "AdamL2";
    case Mode::kAdamScaled:
      return "AdamWScaledGrad";
  }
  return "?";
}

using IsaCase = std::tuple<Isa, size_t, Mode>;

class CpuAdamIsaTest : public ::testing::TestWithParam<IsaCase> {};

// Three steps on one ISA equal three steps on the scalar kernel bit for bit, including bf16/f16 copy-out.
TEST_P(CpuAdamIsaTest, MatchesScalarBitExact) {
  const auto [isa, n, mode] = GetParam();
  if (!kernels::isa_supported(isa)) GTEST_SKIP() << "this CPU cannot run " << kernels::isa_name(isa);
  AdamState ref = AdamState::random(n, 7);
  AdamState got = ref;
  const AdamParams p = params_for(mode);
  for (int t = 1; t <= 3; ++t) {
    ASSERT_TRUE(ref.step(Isa::kScalar, p, t).ok());
    ASSERT_TRUE(got.step(isa, p, t).ok());
  }
  expect_same_bits(ref, got, true);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, CpuAdamIsaTest,
                         ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17},
                                                              size_t{1000}, size_t{4099}, size_t{(1u << 20) + 3}),
                                            ::testing::Values(Mode::kAdamW, Mode::kAdamWNoDecay, Mode::kAdamL2,
                                                              Mode::kAdamScaled)),
                         [](const ::testing::TestParamInfo<IsaCase>& info) {
                           return std::string(kernels::isa_name(std::get<0>(info.param))) + "_n" +
                                  std::to_string(std::get<1>(info.param)) + "_" + mode_name(std::get<2>(info.param));
                         });

// Copy-out of arbitrary bit patterns (NaN, ±inf, subnormals, f16 overflow, ties): with lr = 0 and zero gradients
// the master is unchanged (p·1 − 0), so bf16/f16 outputs must equal element.h's conversion of every pattern.
TEST(CpuAdam, CopyOutEqualsElementConversion) {
  const size_t n = 70001;
  AdamState s = AdamState::random(n, 3);
  std::mt19937 rng(11);
  const uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffa00000u, 0x00000001u, 0x807fffffu,
                               0x477ff000u, 0x477fefffu, 0x33000000u, 0x33000001u, 0x3f808000u, 0x3f818000u,
                               0x00000000u, 0x80000000u, 0x387fe000u, 0x7f7fffffu};
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = i < std::size(specials) ? specials[i] : static_cast<uint32_t>(rng());
    if (i % 3 == 1) bits = (bits & 0x8fffffffu) | 0x30000000u;  // many values near the f16 range
    s.master[i] = kernels::f32_from_bits(bits);
    s.grad[i] = s.m[i] = s.v[i] = 0.0f;
  }
  AdamParams p;
  p.lr = 0.0f;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!kernels::isa_supported(isa)) continue;
    AdamState got = s;
    ASSERT_TRUE(got.step(isa, p, 1).ok());
    size_t bad_bf16 = 0, bad_f16 = 0;
    for (size_t i = 0; i < n; ++i) {
      bad_bf16 += got.bf16[i] != kernels::f32_to_bf16(got.master[i]);
      bad_f16 += got.f16[i] != kernels::f32_to_f16(got.master[i]);
    }
    EXPECT_EQ(bad_bf16, 0u) << kernels::isa_name(isa);
    EXPECT_EQ(bad_f16, 0u) << kernels::isa_name(isa);
    for (size_t i = 0; i < n; ++i) {  // a signaling NaN comes back quiet; everything else is unchanged
      const bool same = std::isnan(s.master[i]) ? std::isnan(got.master[i])
                                                : kernels::f32_bits(got.master[i]) == kernels::f32_bits(s.master[i]);
      ASSERT_TRUE(same) << kernels::isa_name(isa) << ": lr = 0 changed master[" << i << "]";
    }
  }
}

// Copy-out after a real step equals element.h's conversion of the new master, on the best ISA.
TEST(CpuAdam, CopyOutOfUpdatedMaster) {
  AdamState s = AdamState::random(100003, 5);
  ASSERT_TRUE(adam_step(params_for(Mode::kAdamW), s.master.data(), s.m.data(), s.v.data(), s.grad.data(),
                        s.master.size(), s.bf16.data(), s.f16.data(), 1, nullptr)
                  .ok());
  for (size_t i = 0; i < s.master.size(); ++i) {
    ASSERT_EQ(s.bf16[i], kernels::f32_to_bf16(s.master[i])) << i;
    ASSERT_EQ(s.f16[i], kernels::f32_to_f16(s.master[i])) << i;
  }
}

// Either output may be null on its own; the other is still written and the fp32 state is unchanged by the choice.
TEST(CpuAdam, OptionalOutputsIndependent) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!kernels::isa_supported(isa)) continue;
    AdamState both = AdamState::random(1037, 9), only_bf16 = both, none = both;
    const AdamParams p = params_for(Mode::kAdamW);
    ASSERT_TRUE(both.step(isa, p, 2).ok());
    ASSERT_TRUE(adam_step_isa(isa, p, only_bf16.master.data(), only_bf16.m.data(), only_bf16.v.data(),
                              only_bf16.grad.data(), 1037, only_bf16.bf16.data(), nullptr, 2, nullptr)
                    .ok());
    ASSERT_TRUE(none.step(isa, p, 2, nullptr, false).ok());
    EXPECT_EQ(first_bit_diff(only_bf16.bf16, both.bf16), -1);
    EXPECT_EQ(only_bf16.f16, std::vector<uint16_t>(1037, 0xbeef)) << "f16 written although null";
    expect_same_bits(both, none, false);
  }
}

// Decay touches the weights only when asked: weight_decay 0 equals plain Adam; AdamW and L2 decay differ from it
// and from each other; with zero gradient and zero moments, AdamW decays p by exactly p·(1 − lr·wd).
TEST(CpuAdam, WeightDecayOnlyWhereAsked) {
  AdamState base = AdamState::random(4099, 13);
  AdamParams plain = params_for(Mode::kAdamWNoDecay);
  AdamParams plain_adam = plain;
  plain_adam.adam_w_mode = false;
  AdamState a = base, b = base, w = base, l2 = base;
  ASSERT_TRUE(a.step(kernels::best_isa(), plain, 1).ok());
  ASSERT_TRUE(b.step(kernels::best_isa(), plain_adam, 1).ok());
  expect_same_bits(a, b, true);
  ASSERT_TRUE(w.step(kernels::best_isa(), params_for(Mode::kAdamW), 1).ok());
  ASSERT_TRUE(l2.step(kernels::best_isa(), params_for(Mode::kAdamL2), 1).ok());
  EXPECT_NE(first_bit_diff(a.master, w.master), -1);
  EXPECT_NE(first_bit_diff(a.master, l2.master), -1);
  EXPECT_NE(first_bit_diff(w.m, l2.m), -1) << "L2 decay must enter the moments, AdamW's must not";
  EXPECT_EQ(first_bit_diff(a.m, w.m), -1) << "decoupled decay changed the moments";

  AdamState z = base;
  std::fill(z.grad.begin(), z.grad.end(), 0.0f);
  std::fill(z.m.begin(), z.m.end(), 0.0f);
  std::fill(z.v.begin(), z.v.end(), 0.0f);
  const AdamParams pw = params_for(Mode::kAdamW);
  ASSERT_TRUE(z.step(kernels::best_isa(), pw, 1).ok());
  const float factor = 1.0f - pw.lr * pw.weight_decay;
  for (size_t i = 0; i < z.master.size(); ++i) ASSERT_EQ(z.master[i], base.master[i] * factor) << i;
}

// Threaded steps (pools of 1–4 threads, sizes across tile boundaries) equal the single-threaded step bit for bit.
TEST(CpuAdam, ThreadedEqualsSingleThreaded) {
  for (size_t n : {size_t{17}, size_t{(32u << 10) + 1}, size_t{(1u << 20) + 3}}) {
    AdamState ref = AdamState::random(n, 21);
    const AdamParams p = params_for(Mode::kAdamScaled);
    std::vector<AdamState> got;
    for (int t = 1; t <= 2; ++t) ASSERT_TRUE(ref.step(kernels::best_isa(), p, t).ok());
    for (int threads : {1, 2, 3, 4}) {
      auto pool = ThreadPool::create(threads);
      ASSERT_TRUE(pool.ok()) << pool.status().to_string();
      AdamState s = AdamState::random(n, 21);
      for (int t = 1; t <= 2; ++t) ASSERT_TRUE(s.step(kernels::best_isa(), p, t, pool->get()).ok());
      SCOPED_TRACE("threads=" + std::to_string(threads) + " n=" + std::to_string(n));
      expect_same_bits(ref, s, true);
    }
  }
}

// The pool runs every task exactly once across many consecutive jobs (no lost or repeated wake-ups).
TEST(ThreadPool, RunsEveryTaskOnce) {
  auto pool = ThreadPool::create(3);
  ASSERT_TRUE(pool.ok());
  std::vector<std::atomic<int>> hits(257);
  auto fn = [](void* ctx, size_t t) {
    static_cast<std::vector<std::atomic<int>>*>(ctx)->at(t).fetch_add(1, std::memory_order_relaxed);
  };
  for (int round = 0; round < 500; ++round) (*pool)->parallel_for(hits.size(), fn, &hits);
  for (auto& h : hits) EXPECT_EQ(h.load(), 500);
}

TEST(CpuAdam, RejectsBadArguments) {
  AdamState s = AdamState::random(8, 1);
  const AdamParams p;
  EXPECT_EQ(s.step(Isa::kScalar, p, 0).code(), Code::kInvalidArgument);
  EXPECT_EQ(adam_step(p, nullptr, s.m.data(), s.v.data(), s.grad.data(), 8, nullptr, nullptr, 1, nullptr).code(),
            Code::kInvalidArgument);
  AdamParams bad = p;
  bad.beta2 = 1.0f;
  EXPECT_EQ(s.step(Isa::kScalar, bad, 1).code(), Code::kInvalidArgument);
  EXPECT_TRUE(adam_step(p, nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 1, nullptr).ok());
}

}  // namespace
}  // namespace zw::zero::testing
