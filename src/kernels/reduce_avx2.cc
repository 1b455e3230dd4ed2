// kernels/reduce_avx2.cc — AVX2 (+FMA, F16C) kernels: lane traits for every DataType.
//
// Purpose: 256-bit versions of every DataType × ReduceOp and of floating scale(), driven by simd_loop.h. What has
// no single AVX2 instruction is composed from a few: i64 multiply (three 32x32->64 multiplies), i64 min/max
// (compare + blend), u8 multiply (two 16-bit multiplies on even/odd bytes), f32/f64 IEEE minimum/maximum
// (min/max in both operand orders combined bitwise, NaN lanes replaced by a + b), bf16 (even/odd elements as two
// f32 vectors, integer round-to-nearest-even with a NaN blend). Only integer scale() stays scalar.
// Non-goals: AVX-512 encodings (reduce_avx512.cc), masked tails.
//
// Compiled with -mavx2 -mfma -mf16c (set in CMakeLists.txt); reached only when isa_supported(kAvx2).
#include <immintrin.h>

#include <cstdint>

#include "kernels/simd_loop.h"

namespace zw::kernels {
namespace {

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void storeu256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

struct F32Lanes {
  using Math = float;
  using V = __m256;
  static constexpr size_t kLanes = 8;
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V max(V a, V b) {
    const V m = _mm256_and_ps(_mm256_max_ps(a, b), _mm256_max_ps(b, a));
    return _mm256_blendv_ps(m, _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  static V min(V a, V b) {
    const V m = _mm256_or_ps(_mm256_min_ps(a, b), _mm256_min_ps(b, a));
    return _mm256_blendv_ps(m, _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  static V broadcast(Math f) { return _mm256_set1_ps(f); }
};

struct F32 : F32Lanes {
  using Storage = float;
  static constexpr DataType kType = DataType::kFloat32;
  static V load(const Storage* p) { return _mm256_loadu_ps(p); }
  static void store(Storage* p, V v) { _mm256_storeu_ps(p, v); }
};

struct F16 : F32Lanes {
  using Storage = uint16_t;
  static constexpr DataType kType = DataType::kFloat16;
  static V load(const Storage* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(Storage* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// bf16 without widening shuffles: a 32-bit lane holding bf16 pair (lo, hi) is the f32 lo << 16 and the f32
// hi & 0xffff0000, so one load gives two f32 vectors (even and odd elements) and the store merges two rounded
// vectors with one 16-bit blend. The math on each half is exactly F32Lanes'.
struct BF16 {
  using Storage = uint16_t;
  using Math = float;
  struct V {
    __m256 even;
    __m256 odd;
  };
  static constexpr DataType kType = DataType::kBFloat16;
  static constexpr size_t kLanes = 16;
  static V load(const Storage* p) {
    const __m256i x = loadu256(p);
    return {_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))))};
  }
  // Round to nearest-even into the high 16 bits (subnormals kept); NaN lanes keep their top bits | quiet bit.
  // (A NaN computed from bf16 operands has zero low bits and would survive plain rounding; the blend keeps the
  // conversion right for any f32, as element.h's f32_to_bf16 is.)
  static __m256i round_high(__m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
    const __m256i nan = _mm256_or_si256(x, _mm256_set1_epi32(0x400000));
    return _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  }
  static void store(Storage* p, V v) {
    const __m256i even = _mm256_srli_epi32(round_high(v.even), 16);
    storeu256(p, _mm256_blend_epi16(even, round_high(v.odd), 0xaa));
  }
  static V add(V a, V b) { return {F32Lanes::add(a.even, b.even), F32Lanes::add(a.odd, b.odd)}; }
  static V mul(V a, V b) { return {F32Lanes::mul(a.even, b.even), F32Lanes::mul(a.odd, b.odd)}; }
  static V min(V a, V b) { return {F32Lanes::min(a.even, b.even), F32Lanes::min(a.odd, b.odd)}; }
  static V max(V a, V b) { return {F32Lanes::max(a.even, b.even), F32Lanes::max(a.odd, b.odd)}; }
  static V broadcast(Math f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
};

struct F64 {
  using Storage = double;
  using Math = double;
  using V = __m256d;
  static constexpr DataType kType = DataType::kFloat64;
  static constexpr size_t kLanes = 4;
  static V load(const Storage* p) { return _mm256_loadu_pd(p); }
  static void store(Storage* p, V v) { _mm256_storeu_pd(p, v); }
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
  static V mul(V a, V b) { return _mm256_mul_pd(a, b); }
  static V max(V a, V b) {
    const V m = _mm256_and_pd(_mm256_max_pd(a, b), _mm256_max_pd(b, a));
    return _mm256_blendv_pd(m, _mm256_add_pd(a, b), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
  }
  static V min(V a, V b) {
    const V m = _mm256_or_pd(_mm256_min_pd(a, b), _mm256_min_pd(b, a));
    return _mm256_blendv_pd(m, _mm256_add_pd(a, b), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
  }
  static V broadcast(Math f) { return _mm256_set1_pd(f); }
};

template <class T, DataType D>
struct IntLanes {
  using Storage = T;
  using Math = T;
  using V = __m256i;
  static constexpr DataType kType = D;
  static constexpr size_t kLanes = 32 / sizeof(T);
  static V load(const Storage* p) { return loadu256(p); }
  static void store(Storage* p, V v) { storeu256(p, v); }
};

struct I32 : IntLanes<int32_t, DataType::kInt32> {
  static V add(V a, V b) { return _mm256_add_epi32(a, b); }
  static V mul(V a, V b) { return _mm256_mullo_epi32(a, b); }
  static V min(V a, V b) { return _mm256_min_epi32(a, b); }
  static V max(V a, V b) { return _mm256_max_epi32(a, b); }
};

struct I64 : IntLanes<int64_t, DataType::kInt64> {
  static V add(V a, V b) { return _mm256_add_epi64(a, b); }
  // lo(a)*lo(b) + ((hi(a)*lo(b) + lo(a)*hi(b)) << 32), all mod 2^64.
  static V mul(V a, V b) {
    const V low = _mm256_mul_epu32(a, b);
    const V cross1 = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b);
    const V cross2 = _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32));
    return _mm256_add_epi64(low, _mm256_slli_epi64(_mm256_add_epi64(cross1, cross2), 32));
  }
  static V min(V a, V b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); }
  static V max(V a, V b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b)); }
};

struct U8 : IntLanes<uint8_t, DataType::kUInt8> {
  static V add(V a, V b) { return _mm256_add_epi8(a, b); }
  // Even bytes from a 16-bit multiply of the words, odd bytes from a multiply of the words shifted down.
  static V mul(V a, V b) {
    const V even = _mm256_and_si256(_mm256_mullo_epi16(a, b), _mm256_set1_epi16(0xff));
    const V odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
    return _mm256_or_si256(even, _mm256_slli_epi16(odd, 8));
  }
  static V min(V a, V b) { return _mm256_min_epu8(a, b); }
  static V max(V a, V b) { return _mm256_max_epu8(a, b); }
};

KernelTable make_avx2_table() {
  KernelTable t = scalar_kernels();
  install<F32>(t);
  install<F16>(t);
  install<BF16>(t);
  install<F64>(t);
  install<I32>(t);
  install<I64>(t);
  install<U8>(t);
  return t;
}

}  // namespace

const KernelTable& avx2_kernels() {
  static const KernelTable table = make_avx2_table();
  return table;
}

}  // namespace zw::kernels
