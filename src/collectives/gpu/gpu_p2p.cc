// collectives/gpu/gpu_p2p.cc — send_recv batches and all_to_all on CUDA device memory (collectives/gpu_path.h).
//
// Transfers that stay on this rank (a world of one, sends to oneself) are device-to-device copies enqueued on the
// caller's stream: asynchronous, as NCCL's. Transfers between ranks are staged through host memory, synchronously:
// the caller's stream is drained after the device-to-host copies of the sends, the host batch (or host all_to_all)
// runs over the communicator's transport and is waited for, and the host-to-device copies of the receives are
// waited for before the call returns. Correct for any pattern, but the host waits (NCCL returns at once) and nothing
// overlaps. What stream order needs, not done yet:
//  - all_to_all on one node (GpuComm, gpu_comm.h): an op kind whose exchange maps every peer's output, then the arrive
//    barrier, one copy per destination with its own source (input block p -> rank p's output at this rank's block;
//    copy engines on forked streams as enqueue_copy_engine does for all-gather, whose copies share one source), and
//    the done barrier; the communicator-wide sequence numbers fit, as every rank takes part.
//  - send/recv batches on one node: only the peers of the batch take part, so the communicator-wide sequence numbers
//    and barriers of GpuComm do not fit; they need a sequence number per pair of ranks in the signal block, the
//    batch's descriptors through the per-peer mailbox slots (the receiver's buffer handle to the sender), and a kernel
//    (or copy-engine copies between pair barriers) that writes each send into the mapped receive buffer.
//  - across hosts: StagedGpu's mechanism (gpu_staged.h: D2H on the stream, the host operation as a task on the
//    communicator's worker, cuStreamWaitValue32 on a pinned flag before the H2D) with a send_recv batch as the task.
// Staging memory: one pageable buffer per calling thread, grown to the largest batch and kept.
// Non-goals: CUDA graph capture (the host waits), overlap of several batches.
#include <cuda_runtime_api.h>

#include <vector>

#include "collectives/gpu_path.h"
#include "transport/cuda_ipc/cuda_ipc_device.h"

namespace zw::internal {
namespace {

using transport::cuda_ipc::cuda_status;

std::vector<std::byte>& staging(size_t bytes) {
  thread_local std::vector<std::byte> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer;
}

const MemRef& buffer_of(const P2POp& op) { return op.kind == P2PKind::kSend ? op.options.input : op.options.output; }

size_t bytes_of(const P2POp& op) { return op.options.count * dtype_size(op.options.dtype); }

// The device of the first non-empty buffer (validate() made sure all are device memory).
Result<int> device_of(std::span<const P2POp> ops) {
  for (const P2POp& op : ops)
    if (bytes_of(op) > 0) return transport::cuda_ipc::device_of_pointer(buffer_of(op).ptr);
  return 0;
}

// Every transfer stays on this rank: sends matched in order with receives, copied on the stream.
Status copy_local(int rank, std::span<const P2POp> ops, cudaStream_t stream) {
  std::vector<const P2POp*> sends, recvs;
  for (const P2POp& op : ops) (op.kind == P2PKind::kSend ? sends : recvs).push_back(&op);
  if (sends.size() != recvs.size())
    return Status(Code::kInvalidArgument, "send_recv on rank " + std::to_string(rank) + ": " +
                                              std::to_string(sends.size()) + " sends to this rank but " +
                                              std::to_string(recvs.size()) + " receives from it in one batch");
  for (size_t i = 0; i < sends.size(); ++i) {
    const size_t bytes = bytes_of(*sends[i]);
    if (bytes != bytes_of(*recvs[i]))
      return Status(Code::kDesync, "send_recv on rank " + std::to_string(rank) + ": a send of " +
                                       std::to_string(bytes) + " bytes to this rank met a receive of " +
                                       std::to_string(bytes_of(*recvs[i])) + " bytes");
    if (bytes == 0 || buffer_of(*sends[i]).ptr == buffer_of(*recvs[i]).ptr) continue;
    ZW_TRY(cuda_status(cudaMemcpyAsync(buffer_of(*recvs[i]).ptr, buffer_of(*sends[i]).ptr, bytes,
                                       cudaMemcpyDeviceToDevice, stream),
                       "send_recv: cudaMemcpyAsync to this rank"));
  }
  return Status();
}

Status staged_send_recv(Communicator& comm, std::span<const P2POp> ops, cudaStream_t stream) {
  size_t total = 0;
  for (const P2POp& op : ops) total += bytes_of(op);
  std::byte* stage = staging(total).data();
  std::vector<P2POp> host(ops.begin(), ops.end());
  size_t at = 0;
  for (P2POp& op : host) {
    const size_t bytes = bytes_of(op);
    MemRef& m = op.kind == P2PKind::kSend ? op.options.input : op.options.output;
    if (op.kind == P2PKind::kSend && bytes > 0)
      ZW_TRY(cuda_status(cudaMemcpyAsync(stage + at, m.ptr, bytes, cudaMemcpyDeviceToHost, stream),
                         "send_recv: staging a send"));
    m = MemRef::host(stage + at, bytes);
    at += bytes;
  }
  ZW_TRY(cuda_status(cudaStreamSynchronize(stream), "send_recv: waiting for the stream before sending"));
  ZW_ASSIGN_OR_RETURN(Work work, send_recv(comm, host));
  ZW_TRY(work.wait());
  at = 0;
  for (const P2POp& op : ops) {
    const size_t bytes = bytes_of(op);
    if (op.kind == P2PKind::kRecv && bytes > 0)
      ZW_TRY(cuda_status(cudaMemcpyAsync(op.options.output.ptr, stage + at, bytes, cudaMemcpyHostToDevice, stream),
                         "send_recv: copying a receive to the device"));
    at += bytes;
  }
  return cuda_status(cudaStreamSynchronize(stream), "send_recv: waiting for the received data");
}

}  // namespace

Result<Work> run_gpu_send_recv(Communicator& comm, std::span<const P2POp> ops) {
  ZW_ASSIGN_OR_RETURN(int device, device_of(ops));
  transport::cuda_ipc::DeviceScope scope(device);
  ZW_TRY(scope.status());
  auto stream = static_cast<cudaStream_t>(ops[0].options.stream);
  bool local = true;
  for (const P2POp& op : ops) local = local && op.options.peer == comm.rank();
  ZW_TRY(local ? copy_local(comm.rank(), ops, stream) : staged_send_recv(comm, ops, stream));
  return Work();
}

Result<Work> run_gpu_all_to_all(Communicator& comm, const OpDesc& desc, const CollectiveOptions& o) {
  ZW_ASSIGN_OR_RETURN(int device, transport::cuda_ipc::device_of_pointer(o.input.ptr));
  transport::cuda_ipc::DeviceScope scope(device);
  ZW_TRY(scope.status());
  auto stream = static_cast<cudaStream_t>(o.stream);
  const size_t total = desc.count * dtype_size(desc.dtype) * static_cast<size_t>(comm.size());
  if (comm.size() == 1) {
    ZW_TRY(cuda_status(cudaMemcpyAsync(o.output.ptr, o.input.ptr, total, cudaMemcpyDeviceToDevice, stream),
                       "all_to_all: cudaMemcpyAsync"));
    return Work();
  }
  std::byte* stage = staging(2 * total).data();
  ZW_TRY(cuda_status(cudaMemcpyAsync(stage, o.input.ptr, total, cudaMemcpyDeviceToHost, stream),
                     "all_to_all: staging the input"));
  ZW_TRY(cuda_status(cudaStreamSynchronize(stream), "all_to_all: waiting for the stream"));
  CollectiveOptions host = o;
  host.input = MemRef::host(stage, total);
  host.output = MemRef::host(stage + total, total);
  ZW_ASSIGN_OR_RETURN(Work work, all_to_all(comm, host));
  ZW_TRY(work.wait());
  ZW_TRY(cuda_status(cudaMemcpyAsync(o.output.ptr, stage + total, total, cudaMemcpyHostToDevice, stream),
                     "all_to_all: copying the output to the device"));
  ZW_TRY(cuda_status(cudaStreamSynchronize(stream), "all_to_all: waiting for the output"));
  return Work();
}

}  // namespace zw::internal
