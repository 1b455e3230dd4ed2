// tensor/cuda/convert.cu — dtype conversion between f32, bf16 and f16 on one CUDA device, and fill.
//
// convert: a grid-stride kernel per (source, destination) dtype pair; widening is exact, narrowing rounds to
// nearest-even with the CUDA intrinsics (__float2bfloat16_rn, __float2half_rn: subnormals kept, overflow to ±inf),
// which equals kernels/element.h's host conversion for every non-NaN value; a NaN stays a NaN (its payload may
// differ). bf16 ↔ f16 goes through f32, which is exact on the way in, so it rounds once, as on the host. Equal
// dtypes are a device-to-device memcpy. When both pointers allow it, each thread moves 4 elements per access.
// fill: the value is converted to the dtype once on the host with element.h (the host fill's exact bits); an
// all-zero pattern is a memset, anything else a kernel storing 16-byte vectors when the pointer is 16-byte aligned.
// Everything is queued on the current context's stream. Non-goals: f64 and integer dtypes, strided tensors.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/element.h"
#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/dtype.cuh"

namespace zw::tensor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond this: enough to fill an H200 several times

// Four elements moved as one access (8 or 16 bytes).
template <class T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// dst[i] = convert(src[i]) for i < n; `quads`: both pointers are aligned for Quad access.
template <class S, class D>
__global__ void __launch_bounds__(kThreads) convert_kernel(D* dst, const S* src, int64_t n, bool quads) {
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t tid = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  int64_t scalar_from = 0;
  if (quads) {
    const int64_t nq = n / 4;
    const auto* sq = reinterpret_cast<const Quad<S>*>(src);
    auto* dq = reinterpret_cast<Quad<D>*>(dst);
    for (int64_t q = tid; q < nq; q += stride) {
      const Quad<S> in = sq[q];
      Quad<D> out;
#pragma unroll
      for (int j = 0; j < 4; ++j) out.v[j] = from_f32<D>(to_f32(in.v[j]));
      dq[q] = out;
    }
    scalar_from = nq * 4;
  }
  for (int64_t i = scalar_from + tid; i < n; i += stride) dst[i] = from_f32<D>(to_f32(src[i]));
}

template <class S, class D>
Status launch_convert(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  const bool quads = reinterpret_cast<uintptr_t>(src.mem.ptr) % sizeof(Quad<S>) == 0 &&
                     reinterpret_cast<uintptr_t>(dst.mem.ptr) % sizeof(Quad<D>) == 0;
  const unsigned blocks = grid_for(quads ? (n + 3) / 4 : n, kThreads, kMaxBlocks);
  convert_kernel<S, D><<<blocks, kThreads, 0, stream()>>>(dst.data<D>(), src.data<S>(), n, quads);
  ZW_CUDA_LAUNCH_TRY("convert");
  return Status();
}

// Every element of t (n elements of `size` bytes, 2 or 4) set to the bit pattern `bits`.
template <class U>
__global__ void __launch_bounds__(kThreads) fill_kernel(U* t, U bits, int64_t n, bool vectors) {
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t tid = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  int64_t scalar_from = 0;
  if (vectors) {
    Pack<U> pattern;
#pragma unroll
    for (int j = 0; j < kPack<U>; ++j) pattern.v[j] = bits;
    const int64_t nv = n / kPack<U>;
    auto* tv = reinterpret_cast<Pack<U>*>(t);
    for (int64_t i = tid; i < nv; i += stride) tv[i] = pattern;
    scalar_from = nv * kPack<U>;
  }
  for (int64_t i = scalar_from + tid; i < n; i += stride) t[i] = bits;
}

template <class U>
Status launch_fill(const Tensor& t, U bits) {
  const int64_t n = t.numel();
  const bool vectors = aligned16(t.mem.ptr);
  const unsigned blocks = grid_for(vectors ? (n * int64_t(sizeof(U)) + 15) / 16 : n, kThreads, kMaxBlocks);
  fill_kernel<U><<<blocks, kThreads, 0, stream()>>>(t.data<U>(), bits, n, vectors);
  ZW_CUDA_LAUNCH_TRY("fill");
  return Status();
}

}  // namespace

Status convert(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return Status();
  if (src.dtype == dst.dtype) {
    ZW_CUDA_TRY(cudaMemcpyAsync(dst.mem.ptr, src.mem.ptr, src.bytes(), cudaMemcpyDeviceToDevice, stream()));
    return Status();
  }
  return dispatch_dtype("convert", src.dtype, [&](auto s) {
    return dispatch_dtype("convert", dst.dtype, [&](auto d) {
      return launch_convert<typename decltype(s)::type, typename decltype(d)::type>(src, dst);
    });
  });
}

Status fill(const Tensor& t, double value) {
  if (t.numel() == 0) return Status();
  const float f = static_cast<float>(value);  // as the host's fill: double -> f32 -> dtype
  uint32_t bits = 0;
  switch (t.dtype) {
    case DataType::kBFloat16:
      bits = kernels::f32_to_bf16(f);
      break;
    case DataType::kFloat16:
      bits = kernels::f32_to_f16(f);
      break;
    default:
      std::memcpy(&bits, &f, sizeof(bits));
      break;
  }
  if (bits == 0) {
    ZW_CUDA_TRY(cudaMemsetAsync(t.mem.ptr, 0, t.bytes(), stream()));
    return Status();
  }
  if (t.dtype == DataType::kFloat32) return launch_fill<uint32_t>(t, bits);
  return launch_fill<uint16_t>(t, static_cast<uint16_t>(bits));
}

}  // namespace zw::tensor::cuda
