// collectives/gpu/gpu_kernels.cu — the direct collective kernel of gpu_kernels.h.
//
// Data moves in 16-byte vectors when every range is 16-byte aligned (two vectors in flight per thread and source),
// else element by element. Loads and stores to peers go straight over NVLink through the IPC mappings.
#include "collectives/gpu/gpu_kernels.h"
#include "collectives/kernels/cuda/element_cuda.cuh"

namespace zw::internal::gpu {
namespace {

using kernels::cuda::detail::DevElem;
using kernels::cuda::detail::reduce_elem;
using kernels::cuda::detail::scale_elem;
using transport::cuda_ipc::kGpuAborted;
using transport::cuda_ipc::kGpuTimeout;

constexpr int kUnroll = 2;

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

__device__ void report(const DirectArgs& a, uint32_t failure, int peer) {
  volatile GpuHostStatus* s = a.status;
  if (s->failure != 0) return;
  s->peer = peer;
  s->seq = a.seq;
  __threadfence_system();
  s->failure = failure;
  s->abort = 1;  // the other blocks stop waiting too
  __threadfence_system();
}

// Waits until *flag >= a.seq; false after a timeout or an abort request (recorded in a.status).
__device__ bool wait_flag(const DirectArgs& a, const uint64_t* flag, int peer) {
  uint64_t start = 0;
  for (uint32_t spins = 0; load_acquire(flag) < a.seq; ++spins) {
    if ((spins & 255) != 255) continue;
    if (static_cast<volatile GpuHostStatus*>(a.status)->abort != 0) {
      report(a, kGpuAborted, peer);
      return false;
    }
    uint64_t now = global_ns();
    if (start == 0) start = now;
    if (now - start > a.timeout_ns) {
      report(a, kGpuTimeout, peer);
      return false;
    }
  }
  return true;
}

// Every thread t < size (t != rank) waits for peer t; false if any wait failed (then the whole block leaves).
__device__ bool barrier_wait(const DirectArgs& a, bool done_phase) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  const int t = threadIdx.x;
  if (t < a.size && t != a.rank) {
    const uint64_t* flag = done_phase ? &a.mine->done[t] : &a.mine->arrive[t];
    if (!wait_flag(a, flag, t)) failed = 1;
  }
  __syncthreads();
  return failed == 0;
}

template <DataType D, ReduceOp O, bool kVector>
__device__ void move(const DirectArgs& a) {
  using S = typename DevElem<D>::Storage;
  using M = typename DevElem<D>::Math;
  constexpr int kPer = kVector ? 16 / sizeof(S) : 1;
  union Pack {
    typename std::conditional<kVector, uint4, S>::type v;
    S e[kPer];
  };
  const size_t n = kVector ? a.count / kPer : a.count;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const M factor = static_cast<M>(a.scale);
  using V = decltype(Pack::v);
  for (size_t i0 = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i0 < n; i0 += stride * kUnroll) {
    Pack acc[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t i = i0 + u * stride;
      if (i < n) acc[u].v = static_cast<const V*>(a.src[0])[i];
    }
    for (int s = 1; s < a.nsrc; ++s) {
      Pack x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = i0 + u * stride;
        if (i < n) x[u].v = static_cast<const V*>(a.src[s])[i];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < kPer; ++k) acc[u].e[k] = reduce_elem<D, O>(acc[u].e[k], x[u].e[k]);
    }
    if (a.scale != 0) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < kPer; ++k) acc[u].e[k] = scale_elem<D>(acc[u].e[k], factor);
    }
    for (int d = 0; d < a.ndst; ++d) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = i0 + u * stride;
        if (i < n) static_cast<V*>(a.dst[d])[i] = acc[u].v;
      }
    }
  }
  if constexpr (kVector) {
    // The elements after the last whole vector, one per thread.
    const size_t first = n * kPer, tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (first + tid < a.count) {
      const size_t i = first + tid;
      S acc = static_cast<const S*>(a.src[0])[i];
      for (int s = 1; s < a.nsrc; ++s) acc = reduce_elem<D, O>(acc, static_cast<const S*>(a.src[s])[i]);
      if (a.scale != 0) acc = scale_elem<D>(acc, factor);
      for (int d = 0; d < a.ndst; ++d) static_cast<S*>(a.dst[d])[i] = acc;
    }
  }
}

template <DataType D, ReduceOp O>
__global__ void __launch_bounds__(1024) direct_kernel(const DirectArgs a, bool vector) {
  const int t = threadIdx.x;
  if (blockIdx.x == 0 && t < a.size && t != a.rank) store_release(&a.peers[t]->arrive[a.rank], a.seq);
  if (!barrier_wait(a, false)) return;
  if (a.nsrc > 0) {
    if (vector)
      move<D, O, true>(a);
    else
      move<D, O, false>(a);
  }
  // Publish this block's stores before it counts itself finished.
  __threadfence_system();
  __syncthreads();
  __shared__ bool last;
  if (t == 0) last = atomicAdd(&a.mine->blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence_system();
  if (t == 0) a.mine->blocks_done = 0;
  if (t < a.size && t != a.rank) store_release(&a.peers[t]->done[a.rank], a.seq);
  barrier_wait(a, true);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <DataType D>
Status launch_typed(ReduceOp op, const DirectArgs& a, int blocks, int threads, cudaStream_t stream) {
  bool vector = true;
  for (int s = 0; s < a.nsrc; ++s) vector = vector && aligned16(a.src[s]);
  for (int d = 0; d < a.ndst; ++d) vector = vector && aligned16(a.dst[d]);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      direct_kernel<D, ReduceOp::kSum><<<blocks, threads, 0, stream>>>(a, vector);
      break;
    case ReduceOp::kProd:
      direct_kernel<D, ReduceOp::kProd><<<blocks, threads, 0, stream>>>(a, vector);
      break;
    case ReduceOp::kMin:
      direct_kernel<D, ReduceOp::kMin><<<blocks, threads, 0, stream>>>(a, vector);
      break;
    case ReduceOp::kMax:
      direct_kernel<D, ReduceOp::kMax><<<blocks, threads, 0, stream>>>(a, vector);
      break;
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return Status(Code::kSystem, std::string("launching the GPU collective kernel: ") + cudaGetErrorName(err) + " (" +
                                     cudaGetErrorString(err) + ")");
  return Status();
}

}  // namespace

Status launch_direct(DataType dtype, ReduceOp op, const DirectArgs& a, int blocks, int threads, cudaStream_t stream) {
  switch (dtype) {
    case DataType::kFloat32: return launch_typed<DataType::kFloat32>(op, a, blocks, threads, stream);
    case DataType::kFloat16: return launch_typed<DataType::kFloat16>(op, a, blocks, threads, stream);
    case DataType::kBFloat16: return launch_typed<DataType::kBFloat16>(op, a, blocks, threads, stream);
    case DataType::kFloat64: return launch_typed<DataType::kFloat64>(op, a, blocks, threads, stream);
    case DataType::kInt32: return launch_typed<DataType::kInt32>(op, a, blocks, threads, stream);
    case DataType::kInt64: return launch_typed<DataType::kInt64>(op, a, blocks, threads, stream);
    case DataType::kUInt8: return launch_typed<DataType::kUInt8>(op, a, blocks, threads, stream);
  }
  return Status(Code::kUnsupported, "no GPU collective kernel for this data type");
}

}  // namespace zw::internal::gpu
