// tensor/cuda/layernorm_rows.cuh — what the layernorm kernels of layernorm.cu (forward) and layernorm_backward.cu
// share: one warp per row, 8 rows per 256-thread block, and when a row stays in registers.
//
// When C is a multiple of the pack width, the tensors are 16-byte aligned and C ≤ 2048, each lane keeps its packs of
// the row in registers (J packs per lane, J the smallest of 1, 2, 4, 8, 16 that covers the row) and the row is read
// once; otherwise a general kernel walks the row lane-strided as often as it needs (L1/L2 serve the re-reads). Every
// sum is a per-lane sum in a fixed order then a butterfly over the warp, so the bits do not change between runs.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "tensor/cuda/dtype.cuh"

namespace zw::tensor::cuda::layernorm_rows {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // one warp per row
constexpr int kMaxRowFloats = 64;             // f32 values of one row a lane keeps in registers (C ≤ 2048)

// Calls fn(std::integral_constant<int, J>{}) for the smallest J in {1, 2, 4, 8, 16} with J ≥ need and
// J·P ≤ kMaxRowFloats; false when there is none (the caller then takes the general path).
template <int P, class Fn>
bool with_packs_per_lane(int need, Fn&& fn) {
  if (need <= 1) {
    fn(std::integral_constant<int, 1>{});
  } else if (need <= 2) {
    fn(std::integral_constant<int, 2>{});
  } else if (need <= 4) {
    fn(std::integral_constant<int, 4>{});
  } else if (8 * P <= kMaxRowFloats && need <= 8) {
    if constexpr (8 * P <= kMaxRowFloats) fn(std::integral_constant<int, 8>{});
  } else if (16 * P <= kMaxRowFloats && need <= 16) {
    if constexpr (16 * P <= kMaxRowFloats) fn(std::integral_constant<int, 16>{});
  } else {
    return false;
  }
  return true;
}

// Whether the register-resident kernels take rows of C elements of T at these addresses.
template <class T>
bool packed_rows(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % kPack<T> != 0 || C > 32 * kMaxRowFloats) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

}  // namespace zw::tensor::cuda::layernorm_rows
