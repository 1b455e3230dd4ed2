// collectives/gpu/gpu_staged_p2p.cc — send/recv batches and all_to_all on CUDA device memory as staged operations
// (gpu_staged.h): each is one step whose host operation is the ordinary host batch (host_send_recv_task) or host
// all_to_all (host_task) over pinned copies of the device buffers, run on the communicator's worker, so the caller's
// thread only enqueues copies, an event and a stream wait and returns (NCCL's ncclSend/ncclRecv/ncclAlltoAll
// semantics).
//
// Staging layout: a batch's transfers one after another in the order of `ops`, each at a 256-byte boundary (sends:
// D2H before the step, receives: H2D after it); all_to_all's input at 0 and its output after it. Zero-byte transfers
// stay in the host batch (both sides number them) with nothing to copy.
// Non-goals: which batches come here (gpu_p2p.cc: transfers to this rank are copied on the stream there, ranks of one
// process take the synchronous path), chunked pipelining of one batch (one step: its D2H, wire and H2D run one after
// the other), a direct device path on one node.
#include <vector>

#include "collectives/gpu/gpu_staged.h"
#include "collectives/host_task.h"

namespace zw::internal::gpu {
namespace {

constexpr size_t kAlign = 256;

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
size_t bytes_of(const P2POp& op) { return op.options.count * dtype_size(op.options.dtype); }

StagedCopy flat(std::byte* dst, const std::byte* src, size_t bytes) {
  return StagedCopy{dst, bytes, src, bytes, bytes, bytes > 0 ? size_t{1} : size_t{0}};
}

}  // namespace

Result<Work> StagedGpu::send_recv(std::span<const P2POp> ops, const CollectiveOptions& o) {
  size_t total = 0;
  for (const P2POp& op : ops) total += aligned(bytes_of(op));
  auto build = [&](std::byte* staging) {
    StagedStep step;
    step.desc = OpDesc{OpKind::kSendRecv, Algo::kRing, ops[0].options.dtype, ReduceOp::kSum, 0, ops.size()};
    std::vector<P2POp> host(ops.begin(), ops.end());
    size_t at = 0;
    for (P2POp& op : host) {
      const size_t bytes = bytes_of(op);
      std::byte* slot = staging + at;
      if (op.kind == P2PKind::kSend) {
        step.d2h.push_back(flat(slot, op.options.input.data(), bytes));
        op.options.input = MemRef::host(slot, bytes);
      } else {
        step.h2d.push_back(flat(op.options.output.data(), slot, bytes));
        op.options.output = MemRef::host(slot, bytes);
      }
      at += aligned(bytes);
    }
    step.task = host_send_recv_task(impl_, host);
    std::vector<StagedStep> steps;  // not an initializer list: a step's task moves, it does not copy
    steps.push_back(std::move(step));
    return steps;
  };
  return submit(total, build, o, "send_recv on rank " + std::to_string(rank_));
}

Result<Work> StagedGpu::all_to_all(const OpDesc& desc, const CollectiveOptions& o) {
  const size_t total = desc.count * dtype_size(desc.dtype) * static_cast<size_t>(impl_.size());
  const size_t out_at = aligned(total);
  auto build = [&](std::byte* staging) {
    CollectiveOptions host = o;
    host.input = MemRef::host(staging, total);
    host.output = MemRef::host(staging + out_at, total);
    StagedStep step{desc,
                    host_task(impl_, desc, host),
                    {flat(staging, o.input.data(), total)},
                    {flat(o.output.data(), staging + out_at, total)}};
    std::vector<StagedStep> steps;  // not an initializer list: a step's task moves, it does not copy
    steps.push_back(std::move(step));
    return steps;
  };
  return submit(out_at + total, build, o, "all_to_all on rank " + std::to_string(rank_));
}

}  // namespace zw::internal::gpu
