// zero/optim/cpu_adam_avx512.cc — AVX-512 (F, BW, VL, DQ) Adam kernel: 16 elements per iteration.
//
// Purpose: adam_kernel.h's element math with 512-bit instructions in the same order (mul, add, sqrt and div are
// correctly rounded IEEE operations, no FMA), then bf16 copy-out with integer round-to-nearest-even (as element.h,
// keeping subnormals; VCVTNEPS2BF16 is not used because it flushes them) and fp16 copy-out with VCVTPS2PH, which
// rounds exactly as element.h's f32_to_f16. The last n % 16 elements go through the scalar tail.
// Non-goals: masked tails, aligned-only or non-temporal variants.
//
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq (set in CMakeLists.txt); reached only when
// kernels::isa_supported(kAvx512).
// GCC 12 reports its own _mm512_undefined_*() placeholders as maybe-uninitialized (GCC PR 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "zero/optim/adam_kernel.h"

namespace zw::zero {
namespace {

// f32 -> bf16 of 16 lanes: (x + 0x7fff + lsb) >> 16; NaN lanes give (x >> 16) | 0x40.
inline __m256i to_bf16(__m512 p) {
  const __m512i x = _mm512_castps_si512(p);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
  r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q), x, _mm512_set1_epi32(0x400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

template <bool kL2, bool kBf16, bool kF16>
void run(const AdamConsts& c, const AdamArrays& a, size_t n) {
  const __m512 beta1 = _mm512_set1_ps(c.beta1), omb1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 beta2 = _mm512_set1_ps(c.beta2), omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 eps = _mm512_set1_ps(c.eps), step_size = _mm512_set1_ps(c.step_size);
  const __m512 bc2_sqrt = _mm512_set1_ps(c.bc2_sqrt), decay = _mm512_set1_ps(c.decay_factor);
  const __m512 l2 = _mm512_set1_ps(c.l2_decay), gscale = _mm512_set1_ps(c.grad_scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 g = _mm512_mul_ps(_mm512_loadu_ps(a.grad + i), gscale);
    __m512 p = _mm512_loadu_ps(a.master + i);
    if constexpr (kL2) g = _mm512_add_ps(g, _mm512_mul_ps(l2, p));
    const __m512 m = _mm512_add_ps(_mm512_mul_ps(beta1, _mm512_loadu_ps(a.m + i)), _mm512_mul_ps(omb1, g));
    const __m512 v =
        _mm512_add_ps(_mm512_mul_ps(beta2, _mm512_loadu_ps(a.v + i)), _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2_sqrt), eps);
    p = _mm512_sub_ps(_mm512_mul_ps(p, decay), _mm512_div_ps(_mm512_mul_ps(step_size, m), denom));
    _mm512_storeu_ps(a.m + i, m);
    _mm512_storeu_ps(a.v + i, v);
    _mm512_storeu_ps(a.master + i, p);
    if constexpr (kBf16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.bf16_out + i), to_bf16(p));
    if constexpr (kF16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.f16_out + i), _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
    }
  }
  adam_scalar_range<kL2>(c, a, i, n);
}

template <bool kL2>
void run_outputs(const AdamConsts& c, const AdamArrays& a, size_t n) {
  const bool bf16 = a.bf16_out != nullptr, f16 = a.f16_out != nullptr;
  if (bf16 && f16) return run<kL2, true, true>(c, a, n);
  if (bf16) return run<kL2, true, false>(c, a, n);
  if (f16) return run<kL2, false, true>(c, a, n);
  run<kL2, false, false>(c, a, n);
}

}  // namespace

void adam_kernel_avx512(const AdamConsts& c, const AdamArrays& a, size_t n) {
  if (c.l2) return run_outputs<true>(c, a, n);
  run_outputs<false>(c, a, n);
}

}  // namespace zw::zero
