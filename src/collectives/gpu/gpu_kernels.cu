// collectives/gpu/gpu_kernels.cu — the direct collective kernel of gpu_kernels.h.
//
// Data moves in 16-byte vectors when every range is 16-byte aligned (two vectors in flight per thread and source),
// else element by element. The pairwise mode (all_to_all) moves each (src[i], dst[i]) pair in turn with the same
// mover, one source each. Loads and stores to peers go straight over NVLink through the IPC mappings.
#include "collectives/gpu/gpu_device.cuh"
#include "collectives/gpu/gpu_kernels.h"

namespace zw::internal::gpu {
namespace {

using dev::DevElem;
using dev::store_release;

// Every thread t < size (t != rank) waits for peer t; false if any wait failed (then the whole block leaves).
__device__ bool barrier_wait(const DirectArgs& a, bool done_phase) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  const int t = threadIdx.x;
  if (t < a.size && t != a.rank) {
    const uint64_t* flag = done_phase ? &a.mine->done[t] : &a.mine->arrive[t];
    if (!dev::wait_at_least(dev::WaitCtx{a.status, a.seq, a.timeout_ns}, flag, a.seq, t)) failed = 1;
  }
  __syncthreads();
  return failed == 0;
}

template <DataType D, ReduceOp O>
__global__ void __launch_bounds__(1024) direct_kernel(const DirectArgs a, bool vector) {
  const int t = threadIdx.x;
  if (a.phases & kArrivePhase) {
    if (blockIdx.x == 0 && t < a.size && t != a.rank) store_release(&a.peers[t]->arrive[a.rank], a.seq);
    if (!barrier_wait(a, false)) return;
  }
  if (a.nsrc > 0) {
    const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    bool pairwise = false;
    if constexpr (O == ReduceOp::kSum) pairwise = a.pairwise;  // the other ops never get it (one fewer mover each)
    if (pairwise) {  // all_to_all: every pair on its own, one after the other over the whole grid
      for (int d = 0; d < a.ndst; ++d) {
        const void* const from[1] = {a.src[d]};
        void* const to[1] = {a.dst[d]};
        if (vector)
          dev::move_range<D, O, true>(from, 1, to, 1, a.count, 0, first, stride);
        else
          dev::move_range<D, O, false>(from, 1, to, 1, a.count, 0, first, stride);
      }
    } else if (vector) {
      dev::move_range<D, O, true>(a.src, a.nsrc, a.dst, a.ndst, a.count, a.scale, first, stride, a.premultiply,
                                  a.premul);
    } else {
      dev::move_range<D, O, false>(a.src, a.nsrc, a.dst, a.ndst, a.count, a.scale, first, stride, a.premultiply,
                                   a.premul);
    }
  }
  if (!(a.phases & kDonePhase)) return;
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

// The kernel launch_direct launches for (D, O) — the one table of it, which list_direct_kernels lists too.
using DirectKernel = void (*)(DirectArgs, bool);
template <DataType D, ReduceOp O>
constexpr DirectKernel kDirectKernel = direct_kernel<D, O>;

}  // namespace

Status launch_direct(DataType dtype, ReduceOp op, const DirectArgs& a, int blocks, int threads, cudaStream_t stream) {
  bool vector = true;
  for (int s = 0; s < a.nsrc; ++s) vector = vector && dev::aligned16(a.src[s]);
  for (int d = 0; d < a.ndst; ++d) vector = vector && dev::aligned16(a.dst[d]);
  return dev::dispatch(dtype, op, [&]<DataType D, ReduceOp O>() {
    const DirectKernel kernel = kDirectKernel<D, O>;
    kernel<<<blocks, threads, 0, stream>>>(a, vector);
    return dev::launch_status("direct collective");
  });
}

void list_direct_kernels(std::vector<const void*>* kernels) {
  (void)dev::dispatch_all([&]<DataType D, ReduceOp O>() {
    kernels->push_back(reinterpret_cast<const void*>(kDirectKernel<D, O>));
    return Status();
  });
}

}  // namespace zw::internal::gpu
