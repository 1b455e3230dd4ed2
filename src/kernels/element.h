// kernels/element.h — the one definition of the per-element math of every kernel path.
//
// Purpose: what op(a, b) and x * factor mean for each DataType, written once and used by the scalar kernels and by
// the scalar tails of the SIMD kernels, so that all paths are bit-identical. The SIMD loops reproduce exactly these
// rules with vector instructions:
//  - f16 -> f32 is exact; a NaN becomes a quiet NaN keeping its payload (as VCVTPH2PS).
//  - f32 -> f16 rounds to nearest-even, |x| >= 65520 gives ±inf, subnormals are produced, a NaN gives
//    sign | 0x7e00 | top payload bits (as VCVTPS2PH with _MM_FROUND_TO_NEAREST_INT).
//  - bf16 -> f32 is a 16-bit shift; f32 -> bf16 rounds to nearest-even with integer arithmetic and keeps
//    subnormals; a NaN gives its top 16 bits | 0x0040 (quiet). VCVTNEPS2BF16 rounds NaN the same way but flushes
//    subnormals to zero, which is why no path uses it.
//  - float min/max are IEEE 754-2019 minimum/maximum: NaN if either operand is NaN (computed as a + b, which
//    propagates a quieted NaN operand), -0 < +0. Equal operands are combined with bitwise and (max) / or (min),
//    which only matters for ±0; the SIMD paths do the same with max(a, b) & max(b, a).
//  - Integer sum/prod wrap (computed in the unsigned type); min/max compare in the element type.
// Non-goals: integer scaling (reduce_scalar.cc owns it; no SIMD path needs it), other operators.
//
// Everything is in an unnamed namespace on purpose: this header is compiled into translation units built with
// different -m flags, and a shared inline definition could let the linker keep an AVX-512 copy for the scalar
// path. Internal linkage gives each translation unit its own copy.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "zerowire/types.h"

namespace zw::kernels {
namespace {  // NOLINT(google-build-namespaces,cert-dcl59-cpp): internal linkage per ISA, see above

inline float f32_from_bits(uint32_t u) { return std::bit_cast<float>(u); }
inline uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant != 0 ? 0x400000u | (mant << 13) : 0u));
  if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  const float magnitude = static_cast<float>(mant) * 0x1p-24f;  // subnormal or zero: exact in f32
  return sign != 0 ? -magnitude : magnitude;
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // |f| >= 65520 rounds to infinity
  if (ax >= 0x38800000u) {                                              // |f| >= 2^-14: normal f16
    const uint32_t rounded = ax + 0xfffu + ((ax >> 13) & 1u);           // a carry may bump the exponent
    return static_cast<uint16_t>(sign | ((rounded >> 13) - (112u << 10)));
  }
  const uint32_t shift = 126u - (ax >> 23);            // subnormal f16: value = mant >> shift units of 2^-24
  if (shift > 24) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rest = mant & ((1u << shift) - 1u);
  uint32_t q = mant >> shift;
  if (rest > half || (rest == half && (q & 1u) != 0)) ++q;
  return static_cast<uint16_t>(sign | q);
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Storage is the element in memory, Math the type the operator runs in.
template <DataType D>
struct Elem;
template <>
struct Elem<DataType::kFloat32> {
  using Storage = float;
  using Math = float;
  static Math load(Storage x) { return x; }
  static Storage store(Math x) { return x; }
};
template <>
struct Elem<DataType::kFloat16> {
  using Storage = uint16_t;
  using Math = float;
  static Math load(Storage x) { return f16_to_f32(x); }
  static Storage store(Math x) { return f32_to_f16(x); }
};
template <>
struct Elem<DataType::kBFloat16> {
  using Storage = uint16_t;
  using Math = float;
  static Math load(Storage x) { return bf16_to_f32(x); }
  static Storage store(Math x) { return f32_to_bf16(x); }
};
template <>
struct Elem<DataType::kFloat64> {
  using Storage = double;
  using Math = double;
  static Math load(Storage x) { return x; }
  static Storage store(Math x) { return x; }
};
template <class T>
struct IntElem {
  using Storage = T;
  using Math = T;
  static Math load(Storage x) { return x; }
  static Storage store(Math x) { return x; }
};
template <>
struct Elem<DataType::kInt32> : IntElem<int32_t> {};
template <>
struct Elem<DataType::kInt64> : IntElem<int64_t> {};
template <>
struct Elem<DataType::kUInt8> : IntElem<uint8_t> {};

template <class F>
using FloatBits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

// IEEE 754-2019 maximum (kIsMax) or minimum of two floating values, see the header comment.
template <bool kIsMax, class F>
inline F float_min_max(F a, F b) {
  if (a != a || b != b) return a + b;  // NaN in, NaN out
  if (a == b) {
    const auto ua = std::bit_cast<FloatBits<F>>(a);
    const auto ub = std::bit_cast<FloatBits<F>>(b);
    return std::bit_cast<F>(kIsMax ? (ua & ub) : (ua | ub));  // max(-0, +0) = +0, min(-0, +0) = -0
  }
  return (kIsMax ? a > b : a < b) ? a : b;
}

// kAvg is a plain sum here: the caller divides once at the end with scale().
template <ReduceOp O, class T>
inline T apply_op(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if constexpr (O == ReduceOp::kProd) {
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else if constexpr (O == ReduceOp::kMin) {
      return a < b ? a : b;
    } else if constexpr (O == ReduceOp::kMax) {
      return a > b ? a : b;
    } else {
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    }
  } else if constexpr (O == ReduceOp::kProd) {
    return a * b;
  } else if constexpr (O == ReduceOp::kMin) {
    return float_min_max<false>(a, b);
  } else if constexpr (O == ReduceOp::kMax) {
    return float_min_max<true>(a, b);
  } else {
    return a + b;
  }
}

template <DataType D, ReduceOp O>
inline typename Elem<D>::Storage reduce_elem(typename Elem<D>::Storage a, typename Elem<D>::Storage b) {
  return Elem<D>::store(apply_op<O>(Elem<D>::load(a), Elem<D>::load(b)));
}

// Floating types only: factor is already rounded to Math (float for f32/f16/bf16, double for f64).
template <DataType D>
inline typename Elem<D>::Storage scale_elem(typename Elem<D>::Storage x, typename Elem<D>::Math factor) {
  return Elem<D>::store(Elem<D>::load(x) * factor);
}

}  // namespace
}  // namespace zw::kernels
