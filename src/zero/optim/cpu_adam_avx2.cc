// zero/optim/cpu_adam_avx2.cc — AVX2 (+F16C) Adam kernel: 8 elements per iteration.
//
// Purpose: adam_kernel.h's element math with 256-bit instructions in the same order (no FMA), bf16 copy-out with
// integer round-to-nearest-even as element.h, fp16 copy-out with VCVTPS2PH (rounds exactly as element.h's
// f32_to_f16). The last n % 8 elements go through the scalar tail. Non-goals: masked tails, non-temporal stores.
//
// Compiled with -mavx2 -mfma -mf16c (set in CMakeLists.txt; -ffp-contract=off keeps the compiler from fusing);
// reached only when kernels::isa_supported(kAvx2).
#include <immintrin.h>

#include "zero/optim/adam_kernel.h"

namespace zw::zero {
namespace {

// f32 -> bf16 of 8 lanes: (x + 0x7fff + lsb) >> 16; NaN lanes give (x >> 16) | 0x40.
inline __m128i to_bf16(__m256 p) {
  const __m256i x = _mm256_castps_si256(p);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i quiet = _mm256_or_si256(x, _mm256_set1_epi32(0x400000));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_UNORD_Q));
  const __m256i r = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
  // Values are < 2^16, so the unsigned-saturating pack is exact; lanes 0 and 2 hold elements 0-3 and 4-7.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  return _mm256_castsi256_si128(packed);
}

template <bool kL2, bool kBf16, bool kF16>
void run(const AdamConsts& c, const AdamArrays& a, size_t n) {
  const __m256 beta1 = _mm256_set1_ps(c.beta1), omb1 = _mm256_set1_ps(c.one_minus_beta1);
  const __m256 beta2 = _mm256_set1_ps(c.beta2), omb2 = _mm256_set1_ps(c.one_minus_beta2);
  const __m256 eps = _mm256_set1_ps(c.eps), step_size = _mm256_set1_ps(c.step_size);
  const __m256 bc2_sqrt = _mm256_set1_ps(c.bc2_sqrt), decay = _mm256_set1_ps(c.decay_factor);
  const __m256 l2 = _mm256_set1_ps(c.l2_decay), gscale = _mm256_set1_ps(c.grad_scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_mul_ps(_mm256_loadu_ps(a.grad + i), gscale);
    __m256 p = _mm256_loadu_ps(a.master + i);
    if constexpr (kL2) g = _mm256_add_ps(g, _mm256_mul_ps(l2, p));
    const __m256 m = _mm256_add_ps(_mm256_mul_ps(beta1, _mm256_loadu_ps(a.m + i)), _mm256_mul_ps(omb1, g));
    const __m256 v =
        _mm256_add_ps(_mm256_mul_ps(beta2, _mm256_loadu_ps(a.v + i)), _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2_sqrt), eps);
    p = _mm256_sub_ps(_mm256_mul_ps(p, decay), _mm256_div_ps(_mm256_mul_ps(step_size, m), denom));
    _mm256_storeu_ps(a.m + i, m);
    _mm256_storeu_ps(a.v + i, v);
    _mm256_storeu_ps(a.master + i, p);
    if constexpr (kBf16) _mm_storeu_si128(reinterpret_cast<__m128i*>(a.bf16_out + i), to_bf16(p));
    if constexpr (kF16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(a.f16_out + i), _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
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

void adam_kernel_avx2(const AdamConsts& c, const AdamArrays& a, size_t n) {
  if (c.l2) return run_outputs<true>(c, a, n);
  run_outputs<false>(c, a, n);
}

}  // namespace zw::zero
