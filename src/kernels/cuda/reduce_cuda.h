// kernels/cuda/reduce_cuda.h — element-wise reduction and scaling kernels on CUDA device memory.
//
// Purpose: the GPU twin of kernels/reduce.h for reducing collectives on device buffers. Both calls
// only enqueue work on `stream` (stream-ordered, no host synchronization) and return once it is launched.
//
// Semantics: bit-identical to zw::kernels::reduce / scale on the host for every input (see reduce.h):
//  - f16 and bf16 run in f32 and round back to nearest-even (cuda_fp16/cuda_bf16 _rn conversions, subnormals
//    kept: the device code is built without fast math, so no flush-to-zero).
//  - float min/max are IEEE 754-2019 minimum/maximum (NaN-propagating, -0 < +0); a NaN result's sign and
//    payload are unspecified, here as on the host.
//  - Integer sum/prod wrap; min/max are signed for i32/i64 and unsigned for u8; kAvg is a plain sum.
//  - launch_scale multiplies f32/f16/bf16 in f32 by float(factor) and f64 in double. Integer types accept only
//    factor 1 (an exact copy); other integer factors give kUnsupported (the host rule truncates in long double).
// Pointers must be device-accessible; dst may alias a, b or src exactly. Any alignment of the element type works;
// 16-byte aligned buffers take the vector path (16-byte loads and stores).
// Threading: safe to call from several threads on different streams. Non-goals: more than two inputs at once,
// fused reduce-and-copy (the collectives will add those when they need them).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::kernels::cuda {

// dst[i] = op(a[i], b[i]) for i < count, enqueued on `stream`. count 0 launches nothing.
Status launch_reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                     cudaStream_t stream);

// dst[i] = src[i] * factor for i < count, enqueued on `stream` (avg's final divide, FSDP2 pre-multiplied sums).
Status launch_scale(DataType dtype, void* dst, const void* src, size_t count, double factor, cudaStream_t stream);

}  // namespace zw::kernels::cuda
