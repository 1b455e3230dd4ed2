// tensor/cuda/dtype.cuh — what the tensor ops' CUDA kernels share: f32/bf16/f16 values loaded and stored as f32
// (the one definition of the element conversions), pairs of 16-bit values in a 32-bit register, 16-byte vector
// ("pack") access, warp sums, the dtype dispatch of the launchers, grid sizing and the error slot.
//
// Storage types are float, __nv_bfloat16 and __half; kernels compute in f32 and round once per store (round to
// nearest-even, as kernels/element.h and tensor::convert do). A pack is 16 bytes: 4 f32 or 8 16-bit values. A
// kernel takes the pack path only when every pointer it touches is 16-byte aligned and its row length (or element
// count) is a multiple of the pack width; otherwise it runs the same arithmetic one element at a time (K = 1).
// Device code keeps IEEE expf/division/sqrt (no fast math), so results differ from the CPU by rounding only.
// Non-goals: f64 on the device, other storage types, tuning per architecture.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "tensor/cuda_context.h"
#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::tensor::cuda {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// x as it reads back after a store into T (the rounding a stored intermediate such as the residual sum gets).
template <class T>
__device__ __forceinline__ float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

// The bits of `from` as a To of the same size.
template <class To, class From>
__device__ __forceinline__ To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between types of one size");
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
}

// Two 16-bit values (T: __nv_bfloat16 or __half) in one 32-bit register: `lo` (the lower column index) in bits
// 0..15, as mma and ldmatrix fragments and little-endian memory hold element pairs. pack rounds to nearest-even.
template <class T>
struct Pair;
template <>
struct Pair<__nv_bfloat16> {
  __device__ static uint32_t pack(float lo, float hi) { return bit_cast<uint32_t>(__floats2bfloat162_rn(lo, hi)); }
  __device__ static float2 unpack(uint32_t u) { return __bfloat1622float2(bit_cast<__nv_bfloat162>(u)); }
};
template <>
struct Pair<__half> {
  __device__ static uint32_t pack(float lo, float hi) { return bit_cast<uint32_t>(__floats2half2_rn(lo, hi)); }
  __device__ static float2 unpack(uint32_t u) { return __half22float2(bit_cast<__half2>(u)); }
};

// Elements of T in one 16-byte pack.
template <class T>
inline constexpr int kPack = int(16 / sizeof(T));

template <class T>
struct alignas(16) Pack {
  T v[kPack<T>];
};

// Loads p[0, K) as f32. K is 1 (any p) or a multiple of kPack<T> (p 16-byte aligned: K / kPack 16-byte loads).
template <int K, class T>
__device__ __forceinline__ void load_f32(const T* p, float (&out)[K]) {
  if constexpr (K == 1) {
    out[0] = to_f32(*p);
  } else {
    static_assert(K % kPack<T> == 0, "K must be 1 or a whole number of packs");
#pragma unroll
    for (int q = 0; q < K / kPack<T>; ++q) {
      const Pack<T> pk = reinterpret_cast<const Pack<T>*>(p)[q];
#pragma unroll
      for (int j = 0; j < kPack<T>; ++j) out[q * kPack<T> + j] = to_f32(pk.v[j]);
    }
  }
}

// Stores v[0, K) into p[0, K), rounded to T; the alignment rules of load_f32.
template <int K, class T>
__device__ __forceinline__ void store_f32(T* p, const float (&v)[K]) {
  if constexpr (K == 1) {
    *p = from_f32<T>(v[0]);
  } else {
    static_assert(K % kPack<T> == 0, "K must be 1 or a whole number of packs");
#pragma unroll
    for (int q = 0; q < K / kPack<T>; ++q) {
      Pack<T> pk;
#pragma unroll
      for (int j = 0; j < kPack<T>; ++j) pk.v[j] = from_f32<T>(v[q * kPack<T> + j]);
      reinterpret_cast<Pack<T>*>(p)[q] = pk;
    }
  }
}

// Sum over the 32 lanes of a full warp (butterfly: a fixed order, every lane gets the same bits).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Records the first bad input of this context's kernels (first writer wins; see DeviceError). Threads that lose
// the race leave the slot as it is.
__device__ __forceinline__ void record_error(DeviceError* slot, int32_t code, int64_t index, int64_t value,
                                             int64_t limit) {
  if (atomicCAS(&slot->code, 0, code) == 0) {
    slot->index = index;
    slot->value = value;
    slot->limit = limit;
  }
}

// Host side.

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for `units` work items of `threads` each, at least 1 and at most `cap` (the kernels loop grid-stride).
inline unsigned grid_for(int64_t units, int threads, int64_t cap = int64_t{1} << 16) {
  int64_t blocks = (units + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks);
}

// Calls fn(std::type_identity<T>{}) with T the storage type of `dtype` (f32, bf16 or f16); the callers have
// checked the dtype, so anything else is an internal error.
template <class Fn>
Status dispatch_dtype(const char* op, DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat32:
      return fn(std::type_identity<float>{});
    case DataType::kBFloat16:
      return fn(std::type_identity<__nv_bfloat16>{});
    case DataType::kFloat16:
      return fn(std::type_identity<__half>{});
    default:
      return Status(Code::kInternal, std::string(op) + ": dtype " + dtype_name(dtype) + " reached the CUDA kernels");
  }
}

}  // namespace zw::tensor::cuda
