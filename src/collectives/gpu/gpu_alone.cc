// collectives/gpu/gpu_alone.cc — GpuComm at world size 1 (gpu_comm.h): every collective's output is its input.
//
// All-gather, reduce-scatter, all-reduce, broadcast and reduce of one rank copy the input to the output (an average
// divides by 1; min, max and product of one operand are the operand), so there are no peers to describe the
// operation to, no barrier and no kernel: a cudaMemcpyAsync on the caller's stream, which the copy engine runs, and
// nothing at all in place. A pre-multiplied sum scales, so it runs the direct kernel without its barriers (one source,
// one destination: the same rounding as at any world size). As NCCL does at world size 1 (measured on one H200,
// docs/PERF.md: NCCL's 1 GiB all-gather in 510 µs on the copy engine, 0.5 µs in place; zerowire's kernel took 600-800
// and 398 µs before this path).
// all_to_all of one rank comes here too (gpu_p2p.cc hands node-local all_to_all to the engine): a copy as well.
// Non-goals: send/recv to oneself (gpu_p2p.cc copies those inside the batch).
#include <cuda_runtime_api.h>

#include "collectives/gpu/gpu_comm.h"

namespace zw::internal::gpu {

using transport::cuda_ipc::cuda_status;

const void* GpuComm::alone_source(const CollectiveOptions& o) {
  return o.input.bytes > 0 && o.input.ptr != nullptr ? o.input.ptr : o.output.ptr;
}

bool GpuComm::alone_is_idle(const OpDesc& desc, const CollectiveOptions& o) {
  return o.premul == 1.0 && (desc.count == 0 || alone_source(o) == o.output.ptr);
}

Result<Work> GpuComm::issue_alone(const OpDesc& desc, const CollectiveOptions& o, size_t slot) {
  const uint64_t seq = ++seq_;
  auto stream = static_cast<cudaStream_t>(o.stream);
  const size_t bytes = desc.count * dtype_size(desc.dtype);
  const void* src = alone_source(o);
  ZW_TRY(recorder_.mark_start(slot, stream));
  Status st;
  if (o.premul != 1.0) {
    DirectArgs a;
    a.phases = 0;
    a.seq = seq;
    a.nsrc = a.ndst = 1;
    a.src[0] = src;
    a.dst[0] = o.output.ptr;
    a.count = desc.count;
    a.premultiply = true;
    a.premul = o.premul;
    a.mine = shared_->ipc->signals();
    a.status = shared_->ipc->host_status_device();
    st = launch_direct(desc.dtype, desc.op, a, blocks_for(bytes), threads_, stream);
  } else if (src != o.output.ptr) {
    st = cuda_status(cudaMemcpyAsync(o.output.ptr, src, bytes, cudaMemcpyDeviceToDevice, stream),
                     std::string(op_kind_name(desc.kind)) + " at world size 1: cudaMemcpyAsync");
  }
  if (!st.ok()) return fail(st);
  return complete(desc, seq, slot, stream);
}

}  // namespace zw::internal::gpu
