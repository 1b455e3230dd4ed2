// tests/kernels/reference.h — an independent, deliberately naive model of the kernels' semantics for the tests.
//
// Purpose: compute what reduce()/scale() must return without sharing code (or tricks) with the library: f16 and
// bf16 are decoded with ldexp, the math runs in double and is rounded to nearest-even with nearbyint on an exact
// power-of-two scaling. Rounding a double result of one f32 operation to f16/bf16/f32 equals rounding the exact
// result, because double has more than 2p+2 bits for every p involved (p = 11, 8, 24), so this matches the
// library's "compute in f32, round once" exactly. Non-goals: speed; NaN payloads (any NaN matches a NaN).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "zerowire/types.h"

namespace zw::kernels::ref {

inline double f16_decode(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0x1f) {
    v = mant != 0 ? NAN : INFINITY;
  } else if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return (h & 0x8000) != 0 ? -v : v;
}

inline double bf16_decode(uint16_t h) {
  const int exp = (h >> 7) & 0xff;
  const int mant = h & 0x7f;
  double v;
  if (exp == 0xff) {
    v = mant != 0 ? NAN : INFINITY;
  } else if (exp == 0) {
    v = std::ldexp(mant, -133);
  } else {
    v = std::ldexp(128 + mant, exp - 134);
  }
  return (h & 0x8000) != 0 ? -v : v;
}

// Rounds |x| to a binary format with `mant_bits` stored mantissa bits, smallest normal exponent `min_exp` and
// largest finite value `max_finite`, to nearest-even; returns the rounded magnitude (infinity on overflow).
inline double round_magnitude(double ax, int mant_bits, int min_exp, double max_finite) {
  if (ax == 0 || std::isinf(ax)) return ax;
  int e = 0;
  std::frexp(ax, &e);  // ax in [2^(e-1), 2^e)
  const int exp = std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, exp - mant_bits);
  const double r = std::nearbyint(ax / ulp) * ulp;  // default rounding mode: to nearest, ties to even
  return r > max_finite ? INFINITY : r;
}

inline uint16_t f16_encode(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return 0x7e00;
  const double r = round_magnitude(std::fabs(x), 10, -14, 65504.0);
  if (std::isinf(r)) return sign | 0x7c00;
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(r / std::ldexp(1.0, -24));
  int e = 0;
  const double f = std::frexp(r, &e);  // r = f * 2^e, f in [0.5, 1)
  const auto mant = static_cast<uint16_t>((f * 2 - 1) * 1024);
  return sign | static_cast<uint16_t>((e - 1 + 15) << 10) | mant;
}

inline uint16_t bf16_encode(double x) {
  if (std::isnan(x)) return 0x7fc0;
  const double r = round_magnitude(std::fabs(x), 7, -126, std::ldexp(255.0, 120));
  const float rf = static_cast<float>(std::signbit(x) ? -r : r);  // exact: r has at most 8 significant bits
  uint32_t bits = 0;
  std::memcpy(&bits, &rf, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// IEEE 754-2019 maximum/minimum: NaN if either is NaN, -0 < +0.
inline double max_of(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
inline double min_of(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

inline double float_op(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return min_of(a, b);
    case ReduceOp::kMax:
      return max_of(a, b);
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      break;
  }
  return a + b;
}

// Integer ops on the value range of T, computed in 64-bit unsigned arithmetic and truncated (wrap-around).
template <class T>
T int_op(ReduceOp op, T a, T b) {
  const auto ua = static_cast<uint64_t>(static_cast<int64_t>(a));
  const auto ub = static_cast<uint64_t>(static_cast<int64_t>(b));
  switch (op) {
    case ReduceOp::kProd:
      return static_cast<T>(ua * ub);
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      break;
  }
  return static_cast<T>(ua + ub);
}

}  // namespace zw::kernels::ref
