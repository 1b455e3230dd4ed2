// collectives/gpu/gpu_copy_engine.cc — GpuComm's large all-gather on the copy engines (gpu_comm.h): the arrive
// barrier as a one-block kernel on the caller's stream, one cudaMemcpyAsync per destination on its own forked side
// stream (the copy engines run them side by side), the side streams joined back, then the done barrier kernel.
// Used from ZW_CUDA_CE_BYTES per rank (off by default: the direct kernel measured faster on 2×H200, docs/PERF.md).
// Non-goals: reductions (copies only), the ring.
#include <cuda_runtime_api.h>

#include "collectives/gpu/gpu_comm.h"

namespace zw::internal::gpu {

using transport::cuda_ipc::cuda_status;

Status GpuComm::enqueue_copy_engine(const DirectArgs& args, DataType dtype, cudaStream_t stream) {
  if (fork_ == nullptr) ZW_TRY(cuda_status(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreate"));
  while (static_cast<int>(side_streams_.size()) < args.ndst) {
    cudaStream_t side = nullptr;
    cudaEvent_t join = nullptr;
    ZW_TRY(cuda_status(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate"));
    side_streams_.push_back(side);
    ZW_TRY(cuda_status(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), "cudaEventCreate"));
    joins_.push_back(join);
  }
  DirectArgs barrier = args;
  barrier.nsrc = barrier.ndst = 0;
  barrier.phases = kArrivePhase;
  ZW_TRY(launch_direct(dtype, ReduceOp::kSum, barrier, 1, 32, stream));
  ZW_TRY(cuda_status(cudaEventRecord(fork_, stream), "cudaEventRecord"));
  const size_t bytes = args.count * dtype_size(dtype);
  for (int d = 0; d < args.ndst; ++d) {
    cudaStream_t side = side_streams_[d];
    ZW_TRY(cuda_status(cudaStreamWaitEvent(side, fork_, 0), "cudaStreamWaitEvent"));
    ZW_TRY(cuda_status(cudaMemcpyAsync(args.dst[d], args.src[0], bytes, cudaMemcpyDeviceToDevice, side),
                       "copy-engine all-gather copy"));
    ZW_TRY(cuda_status(cudaEventRecord(joins_[d], side), "cudaEventRecord"));
    ZW_TRY(cuda_status(cudaStreamWaitEvent(stream, joins_[d], 0), "cudaStreamWaitEvent"));
  }
  barrier.phases = kDonePhase;
  return launch_direct(dtype, ReduceOp::kSum, barrier, 1, 32, stream);
}

}  // namespace zw::internal::gpu
