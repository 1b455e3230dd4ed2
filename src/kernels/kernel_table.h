// kernels/kernel_table.h — the per-ISA tables of kernel function pointers behind reduce.h.
//
// Purpose: reduce.cc dispatches through one KernelTable per ISA. The scalar table is complete; each SIMD table
// starts as a copy of it and overrides the entries it vectorizes, so a pair without a SIMD kernel falls back to
// the scalar one automatically. Non-goals: per-size or per-alignment variants, runtime code generation.
//
// A SIMD table's getter runs code compiled for that ISA: call it only when isa_supported() says so.
#pragma once

#include <cstddef>

#include "zerowire/types.h"

namespace zw::kernels {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);
using ScaleFn = void (*)(void* dst, const void* src, size_t count, double factor);

struct KernelTable {
  ReduceFn reduce[kNumDataTypes][kNumReduceOps] = {};  // [DataType][ReduceOp]; kAvg holds the sum kernel
  ScaleFn scale[kNumDataTypes] = {};                   // [DataType]
};

inline constexpr int index_of(DataType dtype) { return static_cast<int>(dtype); }
inline constexpr int index_of(ReduceOp op) { return static_cast<int>(op); }

const KernelTable& scalar_kernels();
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();

}  // namespace zw::kernels
