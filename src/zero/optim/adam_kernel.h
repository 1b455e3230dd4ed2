// zero/optim/adam_kernel.h — the per-element Adam math shared by the scalar kernel and the SIMD tails.
//
// Purpose: one definition of the update (see cpu_adam.h for the formula and its operation order) so the scalar path
// and the scalar tails of the AVX2 / AVX-512 loops cannot drift apart; the SIMD loops repeat exactly these
// operations with vector instructions. Like element.h, everything here has internal linkage because the header is
// compiled into translation units with different -m flags. Non-goals: dispatch (cpu_adam.cc), threading.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/element.h"

namespace zw::zero {

// Per-step scalar constants, computed once by cpu_adam.cc.
struct AdamConsts {
  float beta1;            // b1
  float one_minus_beta1;  // 1 − b1 (f32)
  float beta2;            // b2
  float one_minus_beta2;  // 1 − b2 (f32)
  float eps;              // eps
  float step_size;        // lr / (1 − b1^t), double then f32
  float bc2_sqrt;         // sqrt(1 − b2^t), double then f32
  float decay_factor;     // 1 − lr·wd in AdamW mode, else 1
  float l2_decay;         // wd in Adam mode with wd != 0, else 0 (and unused)
  float grad_scale;       // gradient multiplier
  bool l2;                // Adam mode with weight decay: add l2_decay·p to the gradient
};

// One tile of the update: element range [0, n) of each array (already offset by the caller).
struct AdamArrays {
  float* master;
  float* m;
  float* v;
  const float* grad;
  uint16_t* bf16_out;  // may be null
  uint16_t* f16_out;   // may be null
};

using AdamKernelFn = void (*)(const AdamConsts& c, const AdamArrays& a, size_t n);

void adam_kernel_scalar(const AdamConsts& c, const AdamArrays& a, size_t n);
void adam_kernel_avx2(const AdamConsts& c, const AdamArrays& a, size_t n);    // needs AVX2+FMA+F16C
void adam_kernel_avx512(const AdamConsts& c, const AdamArrays& a, size_t n);  // needs AVX-512 F/BW/VL/DQ

namespace {  // NOLINT(google-build-namespaces,cert-dcl59-cpp): internal linkage per ISA, see above

// Elements [begin, n) with the scalar math; the SIMD kernels call this for their tails.
template <bool kL2>
inline void adam_scalar_range(const AdamConsts& c, const AdamArrays& a, size_t begin, size_t n) {
  for (size_t i = begin; i < n; ++i) {
    float g = a.grad[i] * c.grad_scale;
    float p = a.master[i];
    if constexpr (kL2) g = g + c.l2_decay * p;
    const float m = c.beta1 * a.m[i] + c.one_minus_beta1 * g;
    const float v = c.beta2 * a.v[i] + c.one_minus_beta2 * g * g;
    const float denom = std::sqrt(v) / c.bc2_sqrt + c.eps;
    p = p * c.decay_factor - c.step_size * m / denom;
    a.m[i] = m;
    a.v[i] = v;
    a.master[i] = p;
    if (a.bf16_out != nullptr) a.bf16_out[i] = kernels::f32_to_bf16(p);
    if (a.f16_out != nullptr) a.f16_out[i] = kernels::f32_to_f16(p);
  }
}

inline void adam_scalar_tail(const AdamConsts& c, const AdamArrays& a, size_t begin, size_t n) {
  if (c.l2) {
    adam_scalar_range<true>(c, a, begin, n);
  } else {
    adam_scalar_range<false>(c, a, begin, n);
  }
}

}  // namespace
}  // namespace zw::zero
