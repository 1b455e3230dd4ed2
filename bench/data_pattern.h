// Data patterns whose reductions are exact in every dtype and every summation order, with their serial
// reference. Used by the benchmarks' -c validation and by the collective tests. Header-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "zerowire/types.h"

namespace zw::pattern {

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
inline float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float from_f16(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

// Element i of rank r's input: small integers, so that sums and products are exact in every dtype and order.
inline double input_value(ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProd) {
    static const double kFactors[] = {1, -1, 2, 1, -2, 1};
    return kFactors[(rank * 5 + i * 3) % 6];
  }
  return static_cast<double>(static_cast<int>((rank * 131 + i * 7) % 17) - 8);
}

// Stores value v (integer-valued) as dtype at element i of buf.
inline void store_value(DataType dt, void* buf, size_t i, double v) {
  switch (dt) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = to_f16(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = to_bf16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
  }
}

inline double load_value(DataType dt, const void* buf, size_t i) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kFloat16: return from_f16(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return from_bf16(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kUInt8: return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

// v as it reads back after being stored as dtype (u8 keeps it modulo 256).
inline double as_stored(DataType dt, double v) {
  uint8_t buf[8];
  store_value(dt, buf, 0, v);
  return load_value(dt, buf, 0);
}

// The reduction over ranks 0..n-1 of input_value(op, r, i), as dtype would hold it.
inline double reference(DataType dt, ReduceOp op, int n, size_t i) {
  double acc = input_value(op, 0, i);
  for (int r = 1; r < n; ++r) {
    double v = input_value(op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) acc /= n;
  if (dt == DataType::kUInt8) {
    // u8 inputs were stored modulo 256; sums and products wrap modulo 256, min/max compare the stored bytes.
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
      double best = static_cast<uint8_t>(static_cast<int64_t>(input_value(op, 0, i)));
      for (int r = 1; r < n; ++r) {
        double v = static_cast<uint8_t>(static_cast<int64_t>(input_value(op, r, i)));
        best = op == ReduceOp::kMin ? std::min(best, v) : std::max(best, v);
      }
      return best;
    }
    return static_cast<uint8_t>(static_cast<int64_t>(acc));
  }
  return acc;
}

// Tolerance for comparing a result with the reference: exact except for avg's final division.
inline double tolerance(DataType dt, ReduceOp op, double expected) {
  if (op != ReduceOp::kAvg) return 0;
  double rel = dt == DataType::kBFloat16 ? 8e-3 : dt == DataType::kFloat16 ? 1e-3 : 1e-6;
  return rel * std::max(1.0, std::abs(expected));
}

}  // namespace zw::pattern
