// kernels/cuda/element_cuda.cuh — per-element math of the CUDA kernels, mirroring ../element.h.
//
// Purpose: what op(a, b) and x * factor mean for each DataType on the device, written so that every result is
// bit-identical to the host's element.h (the tests compare the two on random bit patterns):
//  - f16 -> f32 and bf16 -> f32 are exact; f32 -> f16/bf16 use the round-to-nearest-even intrinsics, which keep
//    subnormals and overflow to ±inf exactly like the host's integer rounding (NaN payloads may differ, as the
//    host's contract allows).
//  - float min/max: NaN if either operand is NaN (a + b), equal operands combined bitwise (±0), else compare.
// Device code must be built without --use_fast_math / -ftz=true, which would flush subnormals.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "zerowire/types.h"

namespace zw::kernels::cuda::detail {

template <DataType D>
struct DevElem;
template <>
struct DevElem<DataType::kFloat32> {
  using Storage = float;
  using Math = float;
  __device__ static Math load(Storage x) { return x; }
  __device__ static Storage store(Math x) { return x; }
};
template <>
struct DevElem<DataType::kFloat16> {
  using Storage = uint16_t;
  using Math = float;
  __device__ static Math load(Storage x) { return __half2float(__ushort_as_half(x)); }
  __device__ static Storage store(Math x) { return __half_as_ushort(__float2half_rn(x)); }
};
template <>
struct DevElem<DataType::kBFloat16> {
  using Storage = uint16_t;
  using Math = float;
  __device__ static Math load(Storage x) { return __uint_as_float(static_cast<uint32_t>(x) << 16); }
  __device__ static Storage store(Math x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
template <>
struct DevElem<DataType::kFloat64> {
  using Storage = double;
  using Math = double;
  __device__ static Math load(Storage x) { return x; }
  __device__ static Storage store(Math x) { return x; }
};
template <class T>
struct DevIntElem {
  using Storage = T;
  using Math = T;
  __device__ static Math load(Storage x) { return x; }
  __device__ static Storage store(Math x) { return x; }
};
template <>
struct DevElem<DataType::kInt32> : DevIntElem<int32_t> {};
template <>
struct DevElem<DataType::kInt64> : DevIntElem<int64_t> {};
template <>
struct DevElem<DataType::kUInt8> : DevIntElem<uint8_t> {};

__device__ inline float combine_equal(float a, float b, bool is_max) {
  const uint32_t ua = __float_as_uint(a), ub = __float_as_uint(b);
  return __uint_as_float(is_max ? (ua & ub) : (ua | ub));
}
__device__ inline double combine_equal(double a, double b, bool is_max) {
  const auto ua = static_cast<uint64_t>(__double_as_longlong(a));
  const auto ub = static_cast<uint64_t>(__double_as_longlong(b));
  return __longlong_as_double(static_cast<long long>(is_max ? (ua & ub) : (ua | ub)));
}

// IEEE 754-2019 maximum (kIsMax) or minimum, exactly as element.h's float_min_max.
template <bool kIsMax, class F>
__device__ inline F float_min_max(F a, F b) {
  if (a != a || b != b) return a + b;
  if (a == b) return combine_equal(a, b, kIsMax);
  return (kIsMax ? a > b : a < b) ? a : b;
}

// kAvg is a plain sum: the caller divides once at the end with launch_scale.
template <ReduceOp O, class T>
__device__ inline T apply_op(T a, T b) {
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
__device__ inline typename DevElem<D>::Storage reduce_elem(typename DevElem<D>::Storage a,
                                                           typename DevElem<D>::Storage b) {
  return DevElem<D>::store(apply_op<O>(DevElem<D>::load(a), DevElem<D>::load(b)));
}

template <DataType D>
__device__ inline typename DevElem<D>::Storage scale_elem(typename DevElem<D>::Storage x,
                                                          typename DevElem<D>::Math factor) {
  return DevElem<D>::store(DevElem<D>::load(x) * factor);
}

}  // namespace zw::kernels::cuda::detail
