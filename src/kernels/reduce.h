// kernels/reduce.h — element-wise reduction, scaling and copy kernels used by the collectives.
//
// Purpose: the CPU math of every reducing collective (ring/tree reduce-scatter, all-reduce, reduce): combine two
// buffers element-wise, scale a buffer (avg, FSDP2 pre-multiplied sums) and copy large buffers. Each kernel exists
// as a portable scalar loop and as AVX2 and AVX-512 loops; one ISA is picked at runtime, and every path produces
// bit-identical results for the same inputs (the SIMD loops finish their tails with the scalar element functions).
//
// Semantics (shared by every ISA, see element.h for the one definition):
//  - f16 and bf16 are uint16_t storage; the math runs in f32 and rounds back to nearest-even. Overflow gives ±inf,
//    subnormal results are kept (bf16 too), a NaN stays a quiet NaN.
//  - min/max of floating types follow IEEE 754-2019 minimum/maximum: the result is NaN when either operand is NaN,
//    and -0 < +0, so min/max are commutative for every non-NaN input.
//  - A NaN result's sign and payload are unspecified (whichever NaN operand the hardware propagated).
//  - Integer sum/prod wrap around (two's-complement, as NCCL); integer min/max are signed for i32/i64 and
//    unsigned for u8.
//  - scale() multiplies f32/f16/bf16 in f32 by the factor rounded to float, f64 in double by the factor. For f16
//    and bf16 the f32 product is then rounded again, so a result can differ from the correctly rounded
//    x * factor in the last bit (exactly what "compute in f32 and cast back" gives, as PyTorch does). For
//    reduce() that second rounding is provably invisible: f32 has at least 2p+2 bits for f16/bf16 operands.
//  - Results assume the default MXCSR (no flush-to-zero / denormals-are-zero), as the rest of the library does.
//
// Threading: every kernel is stateless and may run concurrently on disjoint buffers. set_isa_for_testing changes a
// process-wide setting and is meant for single-threaded tests and benchmarks only.
// Non-goals: GPU kernels, multi-threading inside a kernel, reductions of more than two inputs at once.
#pragma once

#include <cstddef>

#include "zerowire/types.h"

namespace zw::kernels {

// dst[i] = op(a[i], b[i]) for i < count. dst may alias a or b exactly (in-place); no other overlap is allowed.
// For ReduceOp::kAvg this computes the SUM; the caller divides once at the end with scale(). Integer types treat
// kAvg as kSum as well (callers reject integer avg earlier with reduce_op_supported). Pointers may be null when
// count is 0 and need no alignment beyond that of the element type.
void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);

// dst[i] = src[i] * factor for i < count; dst may alias src exactly. Integer types get a truncating multiply that
// saturates at the type's range (factor 1 is an exact copy, also for i64 values beyond 2^53).
void scale(DataType dtype, void* dst, const void* src, size_t count, double factor);

// From this size on copy() streams; below it plain memcpy measured faster on the reference machine (see copy.cc).
inline constexpr size_t kNonTemporalCopyMinBytes = size_t{16} << 20;
// memcpy for non-overlapping buffers that switches to non-temporal (cache-bypassing) stores from
// kNonTemporalCopyMinBytes on.
void copy(void* dst, const void* src, size_t bytes);
// The streaming copy that copy() uses for large sizes, exposed for the benchmark; correct for any size.
void copy_nontemporal(void* dst, const void* src, size_t bytes);

// Instruction sets with a kernel table, in increasing order of preference.
enum class Isa { kScalar, kAvx2, kAvx512 };

// The ISA every kernel uses: best_isa() unless a test overrode it.
Isa active_isa();
// The best ISA this CPU and OS support (AVX2 needs AVX2+FMA+F16C; AVX-512 needs F+BW+VL+DQ and F16C).
Isa best_isa();
bool isa_supported(Isa isa);
// "scalar", "avx2", "avx512".
const char* isa_name(Isa isa);
// Forces the ISA of later calls, so tests and benchmarks can compare every path. An ISA this CPU lacks is clamped
// to best_isa(); pass best_isa() to restore the default.
void set_isa_for_testing(Isa isa);

}  // namespace zw::kernels
