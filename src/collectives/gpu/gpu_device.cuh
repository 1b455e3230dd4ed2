// collectives/gpu/gpu_device.cuh — device-side pieces shared by the collective kernels: system-scope flag loads and
// stores, waits that give up on a timeout or an abort request (recording the peer in GpuHostStatus), and the
// element mover "reduce nsrc ranges, store to ndst ranges" over a range of threads.
// Device code only; included by gpu_kernels.cu and gpu_ring.cu.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "collectives/gpu/gpu_kernels.h"
#include "kernels/cuda/element_cuda.cuh"

namespace zw::internal::gpu::dev {

using kernels::cuda::detail::DevElem;
using kernels::cuda::detail::reduce_elem;
using kernels::cuda::detail::scale_elem;

__device__ __forceinline__ uint64_t load_acquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// What a waiting thread needs to give up cleanly.
struct WaitCtx {
  GpuHostStatus* status;  // mapped host status word
  uint64_t seq;           // the operation (reported on failure)
  uint64_t timeout_ns;    // longest wait
};

__device__ inline void report(const WaitCtx& w, uint32_t failure, int peer) {
  volatile GpuHostStatus* s = w.status;
  if (s->failure != 0) return;
  s->peer = peer;
  s->seq = w.seq;
  __threadfence_system();
  s->failure = failure;
  s->abort = 1;  // every other waiting block stops too
  __threadfence_system();
}

// Waits until *flag >= value; false after a timeout or an abort request (recorded in w.status).
__device__ inline bool wait_at_least(const WaitCtx& w, const uint64_t* flag, uint64_t value, int peer) {
  uint64_t start = 0;
  for (uint32_t spins = 0; load_acquire(flag) < value; ++spins) {
    if ((spins & 255) != 255) continue;
    if (static_cast<volatile GpuHostStatus*>(w.status)->abort != 0) {
      report(w, transport::cuda_ipc::kGpuAborted, peer);
      return false;
    }
    uint64_t now = global_ns();
    if (start == 0) start = now;
    if (now - start > w.timeout_ns) {
      report(w, transport::cuda_ipc::kGpuTimeout, peer);
      return false;
    }
  }
  return true;
}

#ifndef ZW_GPU_UNROLL
#define ZW_GPU_UNROLL 2  // 16-byte vectors in flight per thread and source
#endif
inline constexpr int kUnroll = ZW_GPU_UNROLL;

// For i in [0, count) handled by threads first, first + stride, ...: dst[d][i] = scale(fold(src[0..nsrc)[i])) for
// every d; with `premultiply` every source element is first multiplied by premul (rounded to the element type:
// NCCL's pre-multiplied sum; a factor of 0 gives zeros, as NCCL's does). Sources fold left to right with the element
// type's rounding at every step (= the host kernels). With kVector every pointer is 16-byte aligned and the bulk moves
// in 16-byte vectors (kUnroll in flight per thread and source); the tail after the last whole vector goes element by
// element.
template <DataType D, ReduceOp O, bool kVector, int N>
__device__ __forceinline__ void move_range(const void* const (&src)[N], int nsrc, void* const (&dst)[N], int ndst,
                                           size_t count, double scale, size_t first, size_t stride,
                                           bool premultiply = false, double premul = 1) {
  using S = typename DevElem<D>::Storage;
  using M = typename DevElem<D>::Math;
  constexpr int kPer = kVector ? 16 / sizeof(S) : 1;
  using V = typename std::conditional<kVector, uint4, S>::type;
  union Pack {
    V v;
    S e[kPer];
  };
  const size_t n = kVector ? count / kPer : count;
  const M factor = static_cast<M>(scale), pre = static_cast<M>(premul);
  auto apply_premul = [&](Pack& p) {
    if (premultiply)
#pragma unroll
      for (int k = 0; k < kPer; ++k) p.e[k] = scale_elem<D>(p.e[k], pre);
  };
  for (size_t i0 = first; i0 < n; i0 += stride * kUnroll) {
    Pack acc[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t i = i0 + u * stride;
      if (i < n) acc[u].v = static_cast<const V*>(src[0])[i];
      apply_premul(acc[u]);
    }
    for (int s = 1; s < nsrc; ++s) {
      Pack x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = i0 + u * stride;
        if (i < n) x[u].v = static_cast<const V*>(src[s])[i];
        apply_premul(x[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < kPer; ++k) acc[u].e[k] = reduce_elem<D, O>(acc[u].e[k], x[u].e[k]);
    }
    if (scale != 0) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < kPer; ++k) acc[u].e[k] = scale_elem<D>(acc[u].e[k], factor);
    }
    for (int d = 0; d < ndst; ++d) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = i0 + u * stride;
        if (i < n) static_cast<V*>(dst[d])[i] = acc[u].v;
      }
    }
  }
  if constexpr (kVector) {
    // The elements after the last whole vector: at most kPer - 1 of them, one per thread.
    if (n * kPer + first < count) {
      const size_t i = n * kPer + first;
      auto load = [&](int s) {
        S x = static_cast<const S*>(src[s])[i];
        return premultiply ? scale_elem<D>(x, pre) : x;
      };
      S acc = load(0);
      for (int s = 1; s < nsrc; ++s) acc = reduce_elem<D, O>(acc, load(s));
      if (scale != 0) acc = scale_elem<D>(acc, factor);
      for (int d = 0; d < ndst; ++d) static_cast<S*>(dst[d])[i] = acc;
    }
  }
}

__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// Host side: runs f.template operator()<D, O>() for the runtime (dtype, op) — one kernel instantiation per pair;
// kAvg runs the sum kernel (the caller scales).
template <class F>
Status dispatch(DataType dtype, ReduceOp op, F&& f) {
  auto by_op = [&]<DataType D>() -> Status {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: return f.template operator()<D, ReduceOp::kSum>();
      case ReduceOp::kProd: return f.template operator()<D, ReduceOp::kProd>();
      case ReduceOp::kMin: return f.template operator()<D, ReduceOp::kMin>();
      case ReduceOp::kMax: return f.template operator()<D, ReduceOp::kMax>();
    }
    return Status(Code::kUnsupported, "no GPU collective kernel for this reduction");
  };
  switch (dtype) {
    case DataType::kFloat32: return by_op.template operator()<DataType::kFloat32>();
    case DataType::kFloat16: return by_op.template operator()<DataType::kFloat16>();
    case DataType::kBFloat16: return by_op.template operator()<DataType::kBFloat16>();
    case DataType::kFloat64: return by_op.template operator()<DataType::kFloat64>();
    case DataType::kInt32: return by_op.template operator()<DataType::kInt32>();
    case DataType::kInt64: return by_op.template operator()<DataType::kInt64>();
    case DataType::kUInt8: return by_op.template operator()<DataType::kUInt8>();
  }
  return Status(Code::kUnsupported, "no GPU collective kernel for this data type");
}

// Host side: runs f.template operator()<D, O>() for every pair dispatch can pick, by running dispatch itself on every
// DataType × ReduceOp value: a kernel table built with it (the launch_* functions' load lists, gpu_kernels.h) holds
// exactly the instantiations the launches can reach.
template <class F>
Status dispatch_all(F&& f) {
  for (int d = 0; d < kNumDataTypes; ++d)
    for (int o = 0; o < kNumReduceOps; ++o) {
      Status st = dispatch(static_cast<DataType>(d), static_cast<ReduceOp>(o), f);
      if (!st.ok()) return st;
    }
  return Status();
}

// The status of the kernel launch just made ("launching the GPU <what> kernel: ...").
inline Status launch_status(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status();
  return Status(Code::kSystem, std::string("launching the GPU ") + what + " kernel: " + cudaGetErrorName(err) + " (" +
                                   cudaGetErrorString(err) + ")");
}

}  // namespace zw::internal::gpu::dev
