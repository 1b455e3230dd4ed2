// collectives/gpu/gpu_p2p.cc — send_recv batches and all_to_all on CUDA device memory (collectives/gpu_path.h): which
// path each takes.
//
//  - Sends to oneself (also inside a batch with other peers) are device-to-device copies enqueued on the caller's
//    stream.
//  - all_to_all of ranks on one node is a collective of the node-local engine (gpu_comm.h: the exchange maps every
//    peer's output and one direct kernel in pairwise mode writes input block p into rank p's output at this rank's
//    block), through run_gpu_collective; ranks of one process (threads) included. At world size 1 that engine copies
//    (gpu_alone.cc), with a completion event and a monitor record like every collective.
//  - Send/recv batches between ranks of different processes, on any topology, and all_to_all across hosts are staged
//    operations on the caller's stream (gpu_staged.h, gpu_staged_p2p.cc): D2H copies of the sends into pinned
//    staging, the host batch (or host all_to_all) on the communicator's worker, a stream wait on a flag, H2D copies of
//    the receives. The call returns once they are enqueued; the Work completes when the stream passed them and the
//    host part succeeded. The engine is the communicator's p2p engine (CommImpl::gpu_p2p_engine), created by this
//    rank alone on first use (a batch involves only its peers), separate from the collectives' engine.
//  - A batch with a peer in this process (ranks as threads), or a staged all_to_all of a communicator with another
//    rank in this process, stays synchronous: the stream is drained after the D2H copies, the host batch runs and is
//    waited for, and so are the H2D copies (pageable staging per calling thread). Ranks of one process share the GPU's
//    context when they share a GPU, where a stream wait of one rank can hold another rank's blocking call (gpu_staged.h
//    measured it); without an exchange this rank cannot tell whether such a peer is on its GPU, so every rank of this
//    process is treated as one that is. Correct for any pattern, but the call waits.
// What stream order on one node could still do better, not done: send/recv batches through mapped receive buffers
// (per-pair sequence numbers in the signal block, descriptors through the per-peer mailbox slots) instead of host
// staging.
// Non-goals: CUDA graph capture (the staged path's host part cannot be captured), tag matching.
#include <cuda_runtime_api.h>

#include <vector>

#include "collectives/gpu/gpu_staged.h"
#include "collectives/gpu_path.h"
#include "collectives/refusal.h"
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
    ZW_TRY(cuda_status(
        cudaMemcpyAsync(buffer_of(*recvs[i]).ptr, buffer_of(*sends[i]).ptr, bytes, cudaMemcpyDeviceToDevice, stream),
        "send_recv: cudaMemcpyAsync to this rank"));
  }
  return Status();
}

// The synchronous path (ranks of this process among the peers, see the file comment).
Status sync_send_recv(Communicator& comm, std::span<const P2POp> ops, cudaStream_t stream) {
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

Status sync_all_to_all(Communicator& comm, const CollectiveOptions& o, size_t total, cudaStream_t stream) {
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
  return cuda_status(cudaStreamSynchronize(stream), "all_to_all: waiting for the output");
}

// The communicator's staged p2p engine, created here on first use (this rank alone), on `device`.
Result<gpu::StagedGpu*> p2p_engine(Communicator& comm, int device, const char* what) {
  CommImpl& impl = comm.impl();
  ZW_ASSIGN_OR_RETURN(GpuEngine * e, impl.gpu_p2p_engine([&]() -> Result<std::unique_ptr<GpuEngine>> {
    return gpu::StagedGpu::create(impl, device, "send/recv and all_to_all");
  }));
  auto* g = static_cast<gpu::StagedGpu*>(e);
  if (g->device() != device)
    return Status(Code::kInvalidArgument,
                  std::string(what) + " on rank " + std::to_string(comm.rank()) +
                      ": this communicator runs its device-memory send/recv and all_to_all on GPU " +
                      std::to_string(g->device()) + " but these buffers are on GPU " + std::to_string(device) +
                      " (use one communicator per GPU)");
  return g;
}

}  // namespace

Result<Work> run_gpu_send_recv(Communicator& comm, std::span<const P2POp> ops) {
  ZW_ASSIGN_OR_RETURN(int device, device_of(ops));
  transport::cuda_ipc::DeviceScope scope(device);
  ZW_TRY(scope.status());
  auto stream = static_cast<cudaStream_t>(ops[0].options.stream);
  const CommImpl& impl = comm.impl();
  std::vector<P2POp> self, remote;
  bool same_process = false;
  for (const P2POp& op : ops) {
    (op.options.peer == comm.rank() ? self : remote).push_back(op);
    same_process = same_process || (op.options.peer != comm.rank() && impl.in_this_process(op.options.peer));
  }
  if (same_process) {
    ZW_TRY(sync_send_recv(comm, ops, stream));
    return Work();
  }
  ZW_TRY(copy_local(comm.rank(), self, stream));
  if (remote.empty()) return Work();
  ZW_ASSIGN_OR_RETURN(gpu::StagedGpu * g, p2p_engine(comm, device, "send_recv"));
  CollectiveOptions o = ops[0].options;  // stream and timeout of ops[0] rule
  return g->send_recv(remote, o);
}

Result<Work> run_gpu_all_to_all(Communicator& comm, const OpDesc& desc, const CollectiveOptions& o) {
  // On one node: a collective of the node-local engine (one pairwise kernel over the peers' mapped outputs; at world
  // size 1 a copy, gpu_alone.cc; its refusals go through the GPU mailbox, run_gpu_collective does the checks).
  if (!gpu::wants_staged_path(comm.impl())) return run_gpu_collective(comm, desc, o);
  // Across hosts: staged. A call refused here is announced to the peers (refusal.h), which would otherwise wait for
  // it: the host queue's marker, as the staged all_to_all is a host operation there.
  auto refuse = [&](const Status& s) {
    announce_refusal(comm, s);
    return s;
  };
  auto device = transport::cuda_ipc::device_of_pointer(o.input.ptr);
  if (!device.ok()) return refuse(device.status().with_context("all_to_all on rank " + std::to_string(comm.rank())));
  transport::cuda_ipc::DeviceScope scope(device.value());
  ZW_TRY(scope.status());
  bool same_process = false;
  for (int p = 0; p < comm.size(); ++p)
    same_process = same_process || (p != comm.rank() && comm.impl().in_this_process(p));
  if (same_process) {
    const size_t total = desc.count * dtype_size(desc.dtype) * static_cast<size_t>(comm.size());
    ZW_TRY(sync_all_to_all(comm, o, total, static_cast<cudaStream_t>(o.stream)));
    return Work();
  }
  auto g = p2p_engine(comm, device.value(), "all_to_all");
  if (!g.ok()) return refuse(g.status());
  return g.value()->all_to_all(desc, o);
}

}  // namespace zw::internal
