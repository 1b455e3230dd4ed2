// The per-operation exchange of the node-local GPU engine (gpu_exchange.h): this rank's descriptor, the peers' through
// the mailbox (a different operation on any rank is a desync naming both), the stream check of ranks that share a
// GPU, and the peers' buffers mapped for what this rank's share of the work touches.
#include "collectives/gpu/gpu_exchange.h"

#include <cstring>
#include <span>
#include <string>

#include "common/clock.h"

namespace zw::internal::gpu {
namespace {

using transport::cuda_ipc::cuda_status;
using transport::cuda_ipc::CudaIpcTransport;

constexpr size_t kOneshotMin = 64 << 10;  // one-shot all-reduce only above this many bytes read from peers

std::string describe_op(const OpRecord& r) {
  return std::string(op_kind_name(static_cast<OpKind>(r.kind))) + "(count=" + std::to_string(r.count) + ", " +
         dtype_name(static_cast<DataType>(r.dtype)) + ", " + reduce_op_name(static_cast<ReduceOp>(r.op)) + ", root " +
         std::to_string(r.root) + ", " + (r.ring ? "ring/" + std::to_string(r.ring_blocks) : std::string("direct")) +
         (r.premul != 1.0 ? ", premul " + std::to_string(r.premul) : std::string()) + ")";
}

// Whether two ranks' descriptors name the same operation (what every rank must have issued).
bool same_operation(const OpRecord& a, const OpRecord& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.op == b.op && a.root == b.root && a.count == b.count &&
         a.ring == b.ring && a.ring_blocks == b.ring_blocks && a.premul == b.premul;
}

}  // namespace

Status GpuComm::exchange(uint64_t seq, const OpDesc& desc, const CollectiveOptions& o, bool ring, int ring_blocks,
                         Peers* peers) {
  ZW_ASSIGN_OR_RETURN(const OpRecord mine, describe(seq, desc, o, ring, ring_blocks));
  ZW_TRY(gather(seq, mine, peers));
  if (desc.count == 0) return Status();  // the ranks agree on an operation with nothing to move: no kernel, no mapping
  ZW_TRY(check_streams(seq, *peers));
  return map_peers(desc, ring, peers);
}

Result<OpRecord> GpuComm::describe(uint64_t seq, const OpDesc& desc, const CollectiveOptions& o, bool ring,
                                   int ring_blocks) {
  CudaIpcTransport& ipc = *shared_->ipc;
  OpRecord mine{};
  mine.seq = seq;
  mine.kind = static_cast<uint8_t>(desc.kind);
  mine.dtype = static_cast<uint8_t>(desc.dtype);
  mine.op = static_cast<uint8_t>(desc.op);
  mine.root = desc.root;
  mine.count = desc.count;
  // all_to_all: peers only write into this rank's output, and its input may be a stream-ordered allocation (libzwnccl
  // copies an in-place input aside with cudaMallocAsync), which CUDA IPC cannot export.
  const bool export_in = o.input.bytes > 0 && desc.kind != OpKind::kAllToAll;
  ZW_ASSIGN_OR_RETURN(mine.in, ipc.exporter().describe(export_in ? o.input.ptr : nullptr));
  ZW_ASSIGN_OR_RETURN(mine.out, ipc.exporter().describe(o.output.bytes > 0 ? o.output.ptr : nullptr));
  mine.premul = o.premul;
  mine.ring = ring ? 1 : 0;
  mine.ring_blocks = ring ? static_cast<uint32_t>(ring_blocks) : 0;
  // One-shot reads more from the peers than the two-step kernel; measured on 2×H200 (docs/PERF.md) it saves 0.5-0.8 µs
  // at 128-512 KiB and costs 0.1-0.7 µs at 8-32 KiB, where a read round trip outweighs the write-back it saves.
  const size_t remote = desc.count * dtype_size(desc.dtype) * static_cast<size_t>(size_ - 1);
  mine.oneshot = desc.kind == OpKind::kAllReduce && !ring && o.input.ptr != o.output.ptr && remote > kOneshotMin &&
                 remote <= oneshot_bytes_;
  if (describe_stream_) {
    auto stream = static_cast<cudaStream_t>(o.stream);
    unsigned int flags = 0;
    unsigned long long id = 0;
    ZW_TRY(cuda_status(cudaStreamGetId(stream, &id), "cudaStreamGetId"));
    ZW_TRY(cuda_status(cudaStreamGetFlags(stream, &flags), "cudaStreamGetFlags"));
    mine.stream_id = id;
    mine.stream_legacy = stream == nullptr || stream == cudaStreamLegacy ? 1 : 0;
    mine.stream_blocking = (flags & cudaStreamNonBlocking) == 0 ? 1 : 0;
  }
  if (ring && desc.kind == OpKind::kReduceScatter) {
    ZW_TRY(ensure_scratch(desc.count * dtype_size(desc.dtype)));
    ZW_ASSIGN_OR_RETURN(mine.scratch, ipc.exporter().describe(scratch_));
  }
  return mine;
}

Status GpuComm::gather(uint64_t seq, const OpRecord& mine, Peers* peers) {
  CudaIpcTransport& ipc = *shared_->ipc;
  ipc.mailbox().post(seq, std::as_bytes(std::span(&mine, 1)));
  posted_seq_ = seq;
  peers->records.assign(size_, mine);
  peers->oneshot = mine.oneshot != 0;
  Deadline deadline = Deadline::after_seconds(timeout_s_);
  std::vector<std::byte> got;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto check = [&]() -> Status {
      ZW_TRY(ipc.peer_alive(p));
      std::lock_guard<std::mutex> lock(shared_->mutex);
      return shared_->failed;
    };
    ZW_TRY(ipc.mailbox().wait(p, seq, deadline, check, &got));
    OpRecord& r = peers->records[p];
    std::memcpy(&r, got.data(), std::min(got.size(), sizeof r));
    peers->oneshot = peers->oneshot && r.oneshot != 0;  // the same choice on every rank: all must allow it
    if (!same_operation(r, mine))
      return Status(Code::kDesync, "GPU collective " + std::to_string(seq) + ": rank " + std::to_string(rank_) +
                                       " issued " + describe_op(mine) + " but " + ipc.describe(p) + " issued " +
                                       describe_op(r));
  }
  return Status();
}

Status GpuComm::check_streams(uint64_t seq, const Peers& peers) const {
  for (const auto& [p, q] : sharers_) {
    const OpRecord &a = peers.records[p], &b = peers.records[q];
    if (a.stream_id != b.stream_id && !(a.stream_legacy && b.stream_blocking) &&
        !(b.stream_legacy && a.stream_blocking))
      continue;
    const auto& gpu = shared_->ipc->peer(p);
    return Status(
        Code::kInvalidArgument,
        "GPU collective " + std::to_string(seq) + ": rank " + std::to_string(p) + " and rank " + std::to_string(q) +
            " share GPU " + std::to_string(gpu.device) + " (" + gpu.uuid.substr(0, 12) + ") in process " +
            std::to_string(gpu.pid) + " and issued it on " +
            (a.stream_id == b.stream_id ? "the same stream" : "the legacy default stream and one that waits for it") +
            ": one rank's kernel would wait behind the other's, which waits for it, until the timeout. "
            "Give each rank its own stream made with cudaStreamCreateWithFlags(..., cudaStreamNonBlocking)");
  }
  return Status();
}

Status GpuComm::map_peers(const OpDesc& desc, bool ring, Peers* peers) {
  CudaIpcTransport& ipc = *shared_->ipc;
  auto quiesce = [&]() -> Status {
    return last_event_ ? cuda_status(cudaEventSynchronize(*last_event_), "waiting before unmapping") : Status();
  };
  auto map = [&](int p, const transport::cuda_ipc::IpcBuffer& buffer, const char* what, std::byte** into) -> Status {
    auto m = ipc.imports().map(p, buffer, ipc.peer(p).same_process || p == rank_, quiesce);
    if (!m.ok()) return m.status().with_context(std::string(what) + " of " + ipc.describe(p));
    *into = m.value();
    return Status();
  };
  const bool reduce_root = desc.kind == OpKind::kReduce && static_cast<int>(desc.root) == rank_;
  peers->in.assign(size_, nullptr);
  peers->out.assign(size_, nullptr);
  peers->scratch.assign(size_, nullptr);
  const int right = (rank_ + 1) % size_;
  for (int p = 0; p < size_; ++p) {
    const OpRecord& r = peers->records[p];
    bool need_in = desc.kind == OpKind::kReduceScatter || desc.kind == OpKind::kAllReduce || reduce_root ||
                   (desc.kind == OpKind::kBroadcast && static_cast<int>(desc.root) == p);
    bool need_out = desc.kind == OpKind::kAllGather || desc.kind == OpKind::kAllToAll ||
                    (desc.kind == OpKind::kAllReduce && !peers->oneshot);
    if (ring) {  // a ring rank writes only into its right neighbour
      need_in = false;
      need_out = p == right;
      if (p == right && desc.kind == OpKind::kReduceScatter)
        ZW_TRY(map(p, r.scratch, "ring scratch", &peers->scratch[p]));
    }
    if (need_in) ZW_TRY(map(p, r.in, "input", &peers->in[p]));
    if (need_out) ZW_TRY(map(p, r.out, "output", &peers->out[p]));
  }
  return Status();
}

}  // namespace zw::internal::gpu
