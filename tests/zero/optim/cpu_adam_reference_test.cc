// tests/zero/optim/cpu_adam_reference_test.cc — the CPU Adam kernel against two references: a double-precision
// torch-semantics update (within a stated tolerance) and tensor/adamw.cc's scalar AdamW (bit for bit, same order).
#include <cmath>
#include <cstdio>

#include "cpu_adam_test_util.h"
#include "tensor/adamw.h"

namespace zw::zero::testing {
namespace {

using kernels::Isa;

// torch.optim.Adam/AdamW in double from the same f32 hyperparameters and inputs.
struct DoubleAdam {
  std::vector<double> p, m, v;
  std::vector<double> m_mag;  // the same recurrence over |terms|: the scale of m's rounding error under cancellation
  void step(const AdamParams& hp, const std::vector<float>& grad, int t) {
    const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, wd = hp.weight_decay;
    const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = double(grad[i]) * double(hp.grad_scale);
      double g_mag = std::fabs(g);
      if (!hp.adam_w_mode) {
        g += wd * p[i];
        g_mag += std::fabs(wd * p[i]);  // the L2 term can cancel the gradient too
      }
      if (hp.adam_w_mode) p[i] *= 1.0 - lr * wd;
      m_mag[i] = b1 * m_mag[i] + (1.0 - b1) * g_mag;
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      v[i] = b2 * v[i] + (1.0 - b2) * g * g;
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + double(hp.eps));
    }
  }
};

// Stated tolerance after 10 steps: |p − p_ref| ≤ 16 ulp(p_ref) + 1e-4·lr per step taken (the f32 update term
// carries a few-ulp relative error); v within a relative 1e-5 (no cancellation: all terms are >= 0); m within
// 1e-5 of the magnitude recurrence sum b1^k·(1−b1)·(|g_k| + |wd·p_k|) + b1^t·|m_0| (m itself may cancel to ~0).
TEST(CpuAdamReference, MatchesDoublePrecisionWithinTolerance) {
  for (bool w_mode : {true, false}) {
    AdamState s = AdamState::random(100003, 31);
    DoubleAdam ref{{s.master.begin(), s.master.end()}, {s.m.begin(), s.m.end()}, {s.v.begin(), s.v.end()}, {}};
    for (double x : ref.m) ref.m_mag.push_back(std::fabs(x));
    AdamParams hp;
    hp.lr = 1e-3f;
    hp.weight_decay = 0.1f;
    hp.adam_w_mode = w_mode;
    hp.grad_scale = 0.5f;
    constexpr int kSteps = 10;
    for (int t = 1; t <= kSteps; ++t) {
      ASSERT_TRUE(s.step(kernels::best_isa(), hp, t).ok());
      ref.step(hp, s.grad, t);
    }
    double worst_p = 0, worst_mv = 0;
    for (size_t i = 0; i < s.master.size(); ++i) {
      const double ulp = std::nextafter(std::fabs(float(ref.p[i])), INFINITY) - std::fabs(float(ref.p[i]));
      const double tol_p = 16 * ulp + 1e-4 * hp.lr * kSteps;
      worst_p = std::max(worst_p, std::fabs(s.master[i] - ref.p[i]) / tol_p);
      worst_mv = std::max(worst_mv, std::fabs(s.m[i] - ref.m[i]) / (1e-5 * ref.m_mag[i] + 1e-30));
      worst_mv = std::max(worst_mv, std::fabs(s.v[i] - ref.v[i]) / (1e-5 * std::fabs(ref.v[i]) + 1e-30));
    }
    std::printf("adam_w_mode=%d: worst error / tolerance: master %.3f, moments %.3f\n", int(w_mode), worst_p, worst_mv);
    EXPECT_LE(worst_p, 1.0) << "worst master error / tolerance, adam_w_mode=" << w_mode;
    EXPECT_LE(worst_mv, 1.0) << "worst moment error / tolerance, adam_w_mode=" << w_mode;
  }
}

// tensor/adamw.cc's adamw_update (the trainer's reference) and adam_step run the same f32 operations in the same
// order, so with equal hyperparameters and grad_scale 1 they agree bit for bit on every ISA, decayed or not.
TEST(CpuAdamReference, MatchesTensorAdamWBitExact) {
  tensor::AdamWConfig cfg;
  cfg.lr = 6e-4f;
  cfg.weight_decay = 0.1f;
  for (bool decay : {true, false}) {
    AdamParams hp;
    hp.lr = cfg.lr;
    hp.beta1 = cfg.beta1;
    hp.beta2 = cfg.beta2;
    hp.eps = cfg.eps;
    hp.weight_decay = decay ? cfg.weight_decay : 0.0f;
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!kernels::isa_supported(isa)) continue;
      AdamState ref = AdamState::random(4099, 41);
      AdamState got = ref;
      for (int t = 1; t <= 5; ++t) {
        tensor::adamw_update(cfg, t, decay, ref.master.data(), ref.grad.data(), ref.m.data(), ref.v.data(),
                             ref.master.size());
        ASSERT_TRUE(got.step(isa, hp, t).ok());
      }
      SCOPED_TRACE(std::string(kernels::isa_name(isa)) + (decay ? " decay" : " no decay"));
      expect_same_bits(ref, got, false);
    }
  }
}

}  // namespace
}  // namespace zw::zero::testing
