// kernels/simd_loop.h — the vector loops shared by the AVX2 and AVX-512 kernel files.
//
// Purpose: one main loop for every SIMD kernel, parametrized by a lane-traits class L that a per-ISA file
// defines for each DataType:
//   L::kType   the DataType;  L::Storage / L::Math as in element.h;  L::V the vector (or a struct of two vectors,
//              as bf16 uses);  L::kLanes elements per V
//   L::load(const Storage*) / L::store(Storage*, V)  unaligned, converting f16/bf16 to and from f32 lanes
//   L::add / L::mul / L::min / L::max (V, V) -> V    the exact vector twins of element.h's apply_op
//   L::broadcast(Math) -> V                          (floating types only, for scale)
// The loops run 4 vectors per iteration, then single vectors, then finish with element.h's scalar functions, so
// a tail element is bit-identical to the same element of the body. Non-goals: masked tails, prefetching,
// non-temporal stores (the collectives read their results again soon).
//
// Include it only from a file compiled for the ISA of its traits; like element.h it has internal linkage.
#pragma once

#include <cstddef>
#include <type_traits>

#include "kernels/element.h"
#include "kernels/kernel_table.h"

namespace zw::kernels {
namespace {  // NOLINT(google-build-namespaces,cert-dcl59-cpp): internal linkage per ISA, see element.h

template <class L, ReduceOp O>
inline typename L::V vec_op(typename L::V a, typename L::V b) {
  if constexpr (O == ReduceOp::kProd) {
    return L::mul(a, b);
  } else if constexpr (O == ReduceOp::kMin) {
    return L::min(a, b);
  } else if constexpr (O == ReduceOp::kMax) {
    return L::max(a, b);
  } else {
    return L::add(a, b);  // kSum, and kAvg whose division happens in scale()
  }
}

template <class L, ReduceOp O>
void reduce_simd(void* dst, const void* a, const void* b, size_t count) {
  using S = typename L::Storage;
  constexpr size_t kW = L::kLanes;
  auto* d = static_cast<S*>(dst);
  const auto* pa = static_cast<const S*>(a);
  const auto* pb = static_cast<const S*>(b);
  size_t i = 0;
  for (; i + 4 * kW <= count; i += 4 * kW) {
    const auto r0 = vec_op<L, O>(L::load(pa + i), L::load(pb + i));
    const auto r1 = vec_op<L, O>(L::load(pa + i + kW), L::load(pb + i + kW));
    const auto r2 = vec_op<L, O>(L::load(pa + i + 2 * kW), L::load(pb + i + 2 * kW));
    const auto r3 = vec_op<L, O>(L::load(pa + i + 3 * kW), L::load(pb + i + 3 * kW));
    L::store(d + i, r0);
    L::store(d + i + kW, r1);
    L::store(d + i + 2 * kW, r2);
    L::store(d + i + 3 * kW, r3);
  }
  for (; i + kW <= count; i += kW) L::store(d + i, vec_op<L, O>(L::load(pa + i), L::load(pb + i)));
  for (; i < count; ++i) d[i] = reduce_elem<L::kType, O>(pa[i], pb[i]);
}

template <class L>
void scale_simd(void* dst, const void* src, size_t count, double factor) {
  using S = typename L::Storage;
  constexpr size_t kW = L::kLanes;
  const auto f = static_cast<typename L::Math>(factor);
  const auto vf = L::broadcast(f);
  auto* d = static_cast<S*>(dst);
  const auto* s = static_cast<const S*>(src);
  size_t i = 0;
  for (; i + 4 * kW <= count; i += 4 * kW) {
    const auto r0 = L::mul(L::load(s + i), vf);
    const auto r1 = L::mul(L::load(s + i + kW), vf);
    const auto r2 = L::mul(L::load(s + i + 2 * kW), vf);
    const auto r3 = L::mul(L::load(s + i + 3 * kW), vf);
    L::store(d + i, r0);
    L::store(d + i + kW, r1);
    L::store(d + i + 2 * kW, r2);
    L::store(d + i + 3 * kW, r3);
  }
  for (; i + kW <= count; i += kW) L::store(d + i, L::mul(L::load(s + i), vf));
  for (; i < count; ++i) d[i] = scale_elem<L::kType>(s[i], f);
}

// Overrides the table entries of L::kType: every op, and scale() for floating types (integer scale stays scalar).
template <class L>
void install(KernelTable& t) {
  auto& row = t.reduce[index_of(L::kType)];
  row[index_of(ReduceOp::kSum)] = reduce_simd<L, ReduceOp::kSum>;
  row[index_of(ReduceOp::kProd)] = reduce_simd<L, ReduceOp::kProd>;
  row[index_of(ReduceOp::kMin)] = reduce_simd<L, ReduceOp::kMin>;
  row[index_of(ReduceOp::kMax)] = reduce_simd<L, ReduceOp::kMax>;
  row[index_of(ReduceOp::kAvg)] = reduce_simd<L, ReduceOp::kSum>;
  if constexpr (std::is_floating_point_v<typename L::Math>) t.scale[index_of(L::kType)] = scale_simd<L>;
}

}  // namespace
}  // namespace zw::kernels
