// The public collectives: argument validation in the caller's thread, algorithm choice, and the task that
// the communicator's worker runs (host_task, collectives/host_task.h, also used by the staged GPU path).
#include <cmath>

#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/direct_all_gather.h"
#include "collectives/gpu_path.h"
#include "collectives/host_task.h"
#include "collectives/refusal.h"
#include "kernels/reduce.h"
#include "zerowire/communicator.h"

namespace zw {
namespace {

using internal::Algo;
using internal::BlockLayout;
using internal::BufRef;
using internal::OpContext;
using internal::OpDesc;
using internal::OpKind;

bool uses_device(const CollectiveOptions& o) {
  return o.input.kind == MemKind::kCudaDevice || o.output.kind == MemKind::kCudaDevice;
}

// Builds usage errors that name the operation and the rank: "all_gather on rank 2: ...". A refused call is
// announced to the peers, which would otherwise wait for it until their timeout (refusal.h).
struct Checker {
  const char* op;
  int rank;
  Communicator* comm = nullptr;  // where to announce the refusal
  bool device = false;           // the call's buffers are device memory (its refusal goes where its peers wait)
  Status fail(const std::string& what) const {
    Status s(Code::kInvalidArgument, std::string(op) + " on rank " + std::to_string(rank) + ": " + what);
    if (comm) internal::announce_refusal(*comm, s, device);
    return s;
  }
  // count elements of dtype times `blocks` in bytes, or a usage error when that does not fit in 64 bits.
  Result<size_t> bytes(size_t count, DataType dtype, size_t blocks = 1) const {
    size_t all = 0;
    if (!internal::checked_bytes(count, dtype, blocks, &all)) return fail(internal::overflow_text(count, dtype, blocks));
    return all;
  }
  Status buffer(const char* which, const MemRef& m, size_t need) const {
    if (need == 0) return Status();
    if (m.ptr == nullptr) return fail(std::string(which) + " buffer is null but " + std::to_string(need) + " bytes are needed");
    if (m.bytes < need)
      return fail(std::string(which) + " buffer holds " + std::to_string(m.bytes) + " bytes but the operation needs " +
                  std::to_string(need));
    return Status();
  }
  // Both buffers of an operation live on the same side: host memory, or CUDA device memory (then the GPU path).
  Status same_kind(const MemRef& in, bool in_used, const MemRef& out, bool out_used) const {
    if (!in_used || !out_used || in.bytes == 0 || out.bytes == 0 || in.kind == out.kind) return Status();
    return fail(std::string("input is ") + mem_kind_name(in.kind) + " memory but output is " +
                mem_kind_name(out.kind) + " memory (copy one of them first; both must be host or both device)");
  }
  Status types(DataType dtype, ReduceOp redop, bool reduces) const {
    if (static_cast<int>(dtype) >= kNumDataTypes) return fail("unknown data type");
    if (!reduces) return Status();
    if (static_cast<int>(redop) >= kNumReduceOps) return fail("unknown reduction op");
    if (!reduce_op_supported(dtype, redop))
      return fail(std::string("reduction ") + reduce_op_name(redop) + " is not defined for " + dtype_name(dtype) +
                  " (use sum and divide, or a floating-point type)");
    return Status();
  }
  // A pre-multiplied sum (premul != 1): only for sum reductions of floating-point device buffers.
  Status premul(const CollectiveOptions& o, bool reduces) const {
    if (o.premul == 1.0) return Status();
    if (!reduces) return fail("premul is only meaningful for reductions (leave it 1)");
    if (o.op != ReduceOp::kSum) return fail(std::string("premul needs the sum reduction, not ") + reduce_op_name(o.op));
    if (!std::isfinite(o.premul)) return fail("premul must be finite");
    const bool floating = o.dtype == DataType::kFloat32 || o.dtype == DataType::kFloat16 ||
                          o.dtype == DataType::kBFloat16 || o.dtype == DataType::kFloat64;
    if (!floating) return fail(std::string("premul is not defined for ") + dtype_name(o.dtype));
    if (o.input.kind != MemKind::kCudaDevice)
      return Status(Code::kUnsupported, std::string(op) + " on rank " + std::to_string(rank) +
                                            ": pre-multiplied sums run on device memory only (host buffers: scale "
                                            "the input first, or use avg)");
    return Status();
  }
  // Input and output may be the same bytes (in-place, `in_place`) or disjoint, nothing else.
  Status overlap(const MemRef& in, size_t in_bytes, const MemRef& out, size_t out_bytes, bool in_place,
                 const char* rule) const {
    if (in_place || !ranges_overlap(in.ptr, in_bytes, out.ptr, out_bytes)) return Status();
    return fail(std::string("input and output overlap without being in-place (") + rule + ")");
  }
};

ReduceOp algo_op(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

void finish_avg(ReduceOp op, DataType dtype, std::byte* data, size_t count, int size) {
  if (op == ReduceOp::kAvg) kernels::scale(dtype, data, data, count, 1.0 / size);
}

Result<BufRef> registered(OpContext& ctx, const MemRef& mem, size_t bytes) {
  ZW_ASSIGN_OR_RETURN(internal::RegBuf reg, ctx.registry.get(mem.slice(0, bytes)));
  return BufRef{reg, reg.offset_of(mem.ptr)};
}

// An operation with nothing to move still meets its peers: a one-byte tree all-gather under the operation's own
// description, so ranks that disagree on the count (0 here, 100 there) fail naming each other within a message's
// time instead of this rank returning OK and the others waiting for it until the timeout. Rooted operations
// (broadcast, reduce) meet first whatever their count: their data flows along one tree, so a rank can finish
// without a message from a rank that disagrees (another root: two of three ranks returned OK); in an all-gather
// every rank's block passes every disagreement on its way, so no rank finishes and every rank fails.
Status meet_peers(OpContext& ctx) {
  if (ctx.size == 1) return Status();
  ZW_ASSIGN_OR_RETURN(internal::RegBuf scratch, ctx.arena.get(static_cast<size_t>(ctx.size)));
  return internal::tree_all_gather(ctx, BufRef{scratch, 0}, BlockLayout::equal(ctx.size, 1));
}

// The worker-side tasks, one per operation (host_task below picks one). Each captures what it needs by value.
using Task = internal::CommImpl::Task;
// Host collectives may run in the thread that waits for them (see comm_impl.h).
constexpr auto kHostRun = internal::CommImpl::RunBy::kWorkerOrWaiter;

Task all_gather_task(const OpDesc& desc, const CollectiveOptions& o, int r, int n) {
  const size_t block = o.count * dtype_size(o.dtype), total = block * n;
  const bool in_place = o.input.ptr == o.output.data() + r * block;
  return internal::CommImpl::inline_task([=](OpContext& ctx) -> Status {
    if (total == 0) return meet_peers(ctx);
    ZW_ASSIGN_OR_RETURN(BufRef out, registered(ctx, o.output, total));
    if (!in_place) kernels::copy(out.at(r * block), o.input.ptr, block);
    const BlockLayout layout = BlockLayout::equal(n, block);
    return desc.algo == Algo::kRing ? ring_all_gather(ctx, out, layout) : tree_all_gather(ctx, out, layout);
  });
}

Task reduce_scatter_task(const OpDesc& desc, const CollectiveOptions& o, int n) {
  const size_t block = o.count * dtype_size(o.dtype), total = block * n;
  return internal::CommImpl::inline_task([=](OpContext& ctx) -> Status {
    if (total == 0) return meet_peers(ctx);
    ZW_ASSIGN_OR_RETURN(BufRef in, registered(ctx, o.input, total));
    ZW_ASSIGN_OR_RETURN(BufRef out, registered(ctx, o.output, block));
    const BlockLayout layout = BlockLayout::equal(n, block);
    ReduceOp op = algo_op(o.op);
    ZW_TRY(desc.algo == Algo::kRing ? ring_reduce_scatter(ctx, in, out, layout, o.dtype, op)
                                    : tree_reduce_scatter(ctx, in, out, layout, o.dtype, op));
    finish_avg(o.op, o.dtype, out.at(0), o.count, n);
    return Status();
  });
}

Task all_reduce_task(const OpDesc& desc, const CollectiveOptions& o, int r, int n) {
  const size_t elem = dtype_size(o.dtype), total = o.count * elem;
  return internal::CommImpl::inline_task([=](OpContext& ctx) -> Status {
    if (total == 0) return meet_peers(ctx);
    ZW_ASSIGN_OR_RETURN(BufRef in, registered(ctx, o.input, total));
    ZW_ASSIGN_OR_RETURN(BufRef out, registered(ctx, o.output, total));
    const BlockLayout layout = BlockLayout::balanced(n, o.count, elem);
    const BufRef mine{out.reg, out.base + layout.offset(r)};
    ReduceOp op = algo_op(o.op);
    bool ring = desc.algo == Algo::kRing;
    if (ring && use_direct_all_gather(ctx)) return all_reduce_direct_gather(ctx, in, out, layout, o.dtype, op, o.op);
    ZW_TRY(ring ? ring_reduce_scatter(ctx, in, mine, layout, o.dtype, op)
                : tree_reduce_scatter(ctx, in, mine, layout, o.dtype, op));
    finish_avg(o.op, o.dtype, mine.at(0), layout.bytes(r) / elem, n);
    return ring ? ring_all_gather(ctx, out, layout) : tree_all_gather(ctx, out, layout);
  });
}

Task broadcast_task(const OpDesc& desc, const CollectiveOptions& o, int r) {
  const size_t total = o.count * dtype_size(o.dtype);
  const bool is_root = o.root == r;
  return internal::CommImpl::inline_task([=](OpContext& ctx) -> Status {
    ZW_TRY(meet_peers(ctx));  // rooted: see meet_peers
    if (total == 0) return Status();
    ZW_ASSIGN_OR_RETURN(BufRef out, registered(ctx, o.output, total));
    BufRef src = out;
    if (is_root && o.input.ptr != o.output.ptr) {
      ZW_ASSIGN_OR_RETURN(src, registered(ctx, o.input, total));
      kernels::copy(out.at(0), src.at(0), total);
    }
    return broadcast_pipelined(ctx, desc.algo, o.root, src, out, total);
  });
}

Task reduce_task(const OpDesc& desc, const CollectiveOptions& o, int r, int n) {
  const size_t total = o.count * dtype_size(o.dtype);
  const bool is_root = o.root == r;
  return internal::CommImpl::inline_task([=](OpContext& ctx) -> Status {
    ZW_TRY(meet_peers(ctx));  // rooted: see meet_peers
    if (total == 0) return Status();
    ZW_ASSIGN_OR_RETURN(BufRef in, registered(ctx, o.input, total));
    BufRef out = in;
    if (is_root) {
      ZW_ASSIGN_OR_RETURN(out, registered(ctx, o.output, total));
    }
    ZW_TRY(reduce_pipelined(ctx, desc.algo, o.root, in, out, o.count, o.dtype, algo_op(o.op)));
    if (is_root) finish_avg(o.op, o.dtype, out.at(0), o.count, n);
    return Status();
  });
}

Task all_to_all_task(const CollectiveOptions& o, int n) {
  const size_t block = o.count * dtype_size(o.dtype), total = block * n;
  return internal::CommImpl::inline_task([=](OpContext& ctx) -> Status {
    if (total == 0) return meet_peers(ctx);
    ZW_ASSIGN_OR_RETURN(BufRef in, registered(ctx, o.input, total));
    ZW_ASSIGN_OR_RETURN(BufRef out, registered(ctx, o.output, total));
    return direct_all_to_all(ctx, in, out, block);
  });
}

Task barrier_task(int n) {
  return internal::CommImpl::inline_task([=](OpContext& ctx) -> Status {
    // An all-gather of one byte per rank: no rank leaves before every rank arrived.
    ZW_ASSIGN_OR_RETURN(internal::RegBuf scratch, ctx.arena.get(static_cast<size_t>(n)));
    return tree_all_gather(ctx, BufRef{scratch, 0}, BlockLayout::equal(n, 1));
  });
}

}  // namespace

namespace internal {

CommImpl::Task host_task(const CommImpl& comm, const OpDesc& desc, const CollectiveOptions& o) {
  const int r = comm.rank(), n = comm.size();
  switch (desc.kind) {
    case OpKind::kAllGather: return all_gather_task(desc, o, r, n);
    case OpKind::kReduceScatter: return reduce_scatter_task(desc, o, n);
    case OpKind::kAllReduce: return all_reduce_task(desc, o, r, n);
    case OpKind::kBroadcast: return broadcast_task(desc, o, r);
    case OpKind::kReduce: return reduce_task(desc, o, r, n);
    case OpKind::kAllToAll: return all_to_all_task(o, n);
    case OpKind::kBarrier:
    case OpKind::kSendRecv: break;  // send_recv batches build their own task (p2p.cc)
  }
  return barrier_task(n);
}

}  // namespace internal

Result<Work> all_gather(Communicator& comm, const CollectiveOptions& o) {
  const int n = comm.size(), r = comm.rank();
  const Checker check{"all_gather", r, &comm, uses_device(o)};
  ZW_TRY(check.types(o.dtype, o.op, false));
  ZW_ASSIGN_OR_RETURN(const size_t total, check.bytes(o.count, o.dtype, size_t(n)));
  const size_t block = o.count * dtype_size(o.dtype);
  ZW_TRY(check.premul(o, false));
  ZW_TRY(check.buffer("input", o.input, block));
  ZW_TRY(check.buffer("output", o.output, total));
  const bool in_place = o.input.ptr == o.output.data() + r * block;
  ZW_TRY(check.overlap(o.input, block, o.output, total, in_place, "in-place means input == output + rank*count"));
  OpDesc desc{OpKind::kAllGather, comm.impl().choose_algo(total), o.dtype, ReduceOp::kSum, 0, o.count};
  ZW_TRY(check.same_kind(o.input, true, o.output, true));
  if (uses_device(o)) return internal::run_gpu_collective(comm, desc, o);
  return comm.impl().enqueue(desc, o.timeout, internal::host_task(comm.impl(), desc, o), kHostRun);
}

Result<Work> reduce_scatter(Communicator& comm, const CollectiveOptions& o) {
  const int n = comm.size(), r = comm.rank();
  const Checker check{"reduce_scatter", r, &comm, uses_device(o)};
  ZW_TRY(check.types(o.dtype, o.op, true));
  ZW_ASSIGN_OR_RETURN(const size_t total, check.bytes(o.count, o.dtype, size_t(n)));
  const size_t block = o.count * dtype_size(o.dtype);
  ZW_TRY(check.premul(o, true));
  ZW_TRY(check.buffer("input", o.input, total));
  ZW_TRY(check.buffer("output", o.output, block));
  const bool in_place = o.output.ptr == o.input.data() + r * block;
  ZW_TRY(check.overlap(o.input, total, o.output, block, in_place, "in-place means output == input + rank*count"));
  OpDesc desc{OpKind::kReduceScatter, comm.impl().choose_algo(total), o.dtype, o.op, 0, o.count};
  ZW_TRY(check.same_kind(o.input, true, o.output, true));
  if (uses_device(o)) return internal::run_gpu_collective(comm, desc, o);
  return comm.impl().enqueue(desc, o.timeout, internal::host_task(comm.impl(), desc, o), kHostRun);
}

Result<Work> all_reduce(Communicator& comm, const CollectiveOptions& o) {
  const int r = comm.rank();
  const Checker check{"all_reduce", r, &comm, uses_device(o)};
  ZW_TRY(check.types(o.dtype, o.op, true));
  ZW_ASSIGN_OR_RETURN(const size_t total, check.bytes(o.count, o.dtype));
  ZW_TRY(check.premul(o, true));
  ZW_TRY(check.buffer("input", o.input, total));
  ZW_TRY(check.buffer("output", o.output, total));
  ZW_TRY(check.overlap(o.input, total, o.output, total, o.input.ptr == o.output.ptr, "in-place means input == output"));
  OpDesc desc{OpKind::kAllReduce, comm.impl().choose_algo(total), o.dtype, o.op, 0, o.count};
  ZW_TRY(check.same_kind(o.input, true, o.output, true));
  if (uses_device(o)) return internal::run_gpu_collective(comm, desc, o);
  return comm.impl().enqueue(desc, o.timeout, internal::host_task(comm.impl(), desc, o), kHostRun);
}

Result<Work> broadcast(Communicator& comm, const CollectiveOptions& o) {
  const int n = comm.size(), r = comm.rank();
  const Checker check{"broadcast", r, &comm, uses_device(o)};
  ZW_TRY(check.types(o.dtype, o.op, false));
  ZW_ASSIGN_OR_RETURN(const size_t total, check.bytes(o.count, o.dtype));
  ZW_TRY(check.premul(o, false));
  if (o.root < 0 || o.root >= n)
    return check.fail("root " + std::to_string(o.root) + " is outside 0.." + std::to_string(n - 1));
  const bool is_root = o.root == r;
  if (is_root) ZW_TRY(check.buffer("input", o.input, total));
  ZW_TRY(check.buffer("output", o.output, total));
  const bool in_place = !is_root || o.input.ptr == o.output.ptr;
  ZW_TRY(check.overlap(o.input, total, o.output, total, in_place, "in-place means input == output"));
  OpDesc desc{OpKind::kBroadcast, comm.impl().choose_algo(total), o.dtype, ReduceOp::kSum,
              static_cast<uint32_t>(o.root), o.count};
  ZW_TRY(check.same_kind(o.input, is_root, o.output, true));
  if (uses_device(o)) return internal::run_gpu_collective(comm, desc, o);
  return comm.impl().enqueue(desc, o.timeout, internal::host_task(comm.impl(), desc, o), kHostRun);
}

Result<Work> reduce(Communicator& comm, const CollectiveOptions& o) {
  const int n = comm.size(), r = comm.rank();
  const Checker check{"reduce", r, &comm, uses_device(o)};
  ZW_TRY(check.types(o.dtype, o.op, true));
  ZW_ASSIGN_OR_RETURN(const size_t total, check.bytes(o.count, o.dtype));
  ZW_TRY(check.premul(o, true));
  if (o.root < 0 || o.root >= n)
    return check.fail("root " + std::to_string(o.root) + " is outside 0.." + std::to_string(n - 1));
  const bool is_root = o.root == r;
  ZW_TRY(check.buffer("input", o.input, total));
  if (is_root) {
    ZW_TRY(check.buffer("output", o.output, total));
    ZW_TRY(check.overlap(o.input, total, o.output, total, o.input.ptr == o.output.ptr, "in-place means input == output"));
  }
  OpDesc desc{OpKind::kReduce, comm.impl().choose_algo(total), o.dtype, o.op, static_cast<uint32_t>(o.root), o.count};
  ZW_TRY(check.same_kind(o.input, true, o.output, is_root));
  if (uses_device(o)) return internal::run_gpu_collective(comm, desc, o);
  return comm.impl().enqueue(desc, o.timeout, internal::host_task(comm.impl(), desc, o), kHostRun);
}

Result<Work> barrier(Communicator& comm) {
  OpDesc desc{OpKind::kBarrier, Algo::kTree, DataType::kUInt8, ReduceOp::kSum, 0, 0};
  return comm.impl().enqueue(desc, std::chrono::milliseconds(0), internal::host_task(comm.impl(), desc, {}), kHostRun);
}

}  // namespace zw
