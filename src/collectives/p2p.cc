// Point-to-point and all-to-all: send, recv, send_recv batches, gather and scatter built on them, and all_to_all.
//
// A send_recv batch is one operation on the communicator's queue (in issue order with the collectives) whose task
// moves every transfer of the batch in chunks: per iteration it posts the receives `slots` chunks ahead, sends this
// iteration's chunk of every send, then waits for this iteration's chunk of every receive. Transfers are numbered
// per (sender, receiver) pair (Rendezvous::next_send_seq / next_recv_seq), not in the collective sequence, because
// ranks outside the batch issue nothing. Transfers to this rank itself are matched in order inside the batch and
// copied. Device-memory batches and all-to-alls go to gpu_path.h (staged through pinned memory on the caller's stream:
// gpu/gpu_staged_p2p.cc runs this file's batch task, host_send_recv_task, on the staged copies).
// Non-goals: tag matching (NCCL has none either), receives of unknown size, more distinct buffers in one batch than
// the registration cache holds (64; they would be registered again, which only costs time on shm and tcp).
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/gpu_path.h"
#include "collectives/host_task.h"
#include "collectives/refusal.h"
#include "kernels/reduce.h"
#include "zerowire/communicator.h"

namespace zw {
namespace {

using internal::BufRef;
using internal::OpContext;
using internal::OpDesc;
using internal::OpKind;

// One transfer of a batch, validated.
struct Xfer {
  P2PKind kind;
  int peer;
  MemRef mem;    // input (send) or output (recv)
  size_t bytes;  // count × dtype size
};

Status usage(const char* op, int rank, const std::string& what) {
  return Status(Code::kInvalidArgument, std::string(op) + " on rank " + std::to_string(rank) + ": " + what);
}

const char* kind_name(P2PKind k) { return k == P2PKind::kSend ? "send" : "recv"; }

Result<std::vector<Xfer>> validate(const Communicator& comm, std::span<const P2POp> ops, bool* device) {
  const int n = comm.size(), r = comm.rank();
  std::vector<Xfer> xs;
  bool any_host = false, any_device = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const CollectiveOptions& o = op.options;
    const char* what = kind_name(op.kind);
    const std::string which = std::string(what) + " #" + std::to_string(i) + " of the batch";
    if (op.kind != P2PKind::kSend && op.kind != P2PKind::kRecv) return usage("send_recv", r, which + ": unknown kind");
    if (static_cast<int>(o.dtype) >= kNumDataTypes) return usage(what, r, which + ": unknown data type");
    if (o.peer < 0 || o.peer >= n)
      return usage(what, r, which + ": peer " + std::to_string(o.peer) + " is outside 0.." + std::to_string(n - 1));
    const MemRef& m = op.kind == P2PKind::kSend ? o.input : o.output;
    size_t bytes = 0;
    if (!internal::checked_bytes(o.count, o.dtype, 1, &bytes))
      return usage(what, r, which + ": " + internal::overflow_text(o.count, o.dtype, 1));
    if (bytes > 0 && m.ptr == nullptr)
      return usage(what, r, which + ": buffer is null but " + std::to_string(bytes) + " bytes are needed");
    if (bytes > 0 && m.bytes < bytes)
      return usage(what, r, which + ": buffer holds " + std::to_string(m.bytes) + " bytes but " +
                                std::to_string(bytes) + " are needed");
    if (bytes > 0) (m.kind == MemKind::kCudaDevice ? any_device : any_host) = true;
    xs.push_back(Xfer{op.kind, o.peer, m, bytes});
  }
  if (any_host && any_device)
    return usage("send_recv", r, "the batch mixes host and device buffers (all must be host or all device memory)");
  *device = any_device;
  return xs;
}

// Sends to this rank matched in order with receives from it: each pair must be in the batch, with equal sizes.
Result<std::vector<std::pair<const Xfer*, const Xfer*>>> match_self(const std::vector<Xfer>& xs, int r) {
  std::vector<const Xfer*> sends, recvs;
  for (const Xfer& x : xs)
    if (x.peer == r) (x.kind == P2PKind::kSend ? sends : recvs).push_back(&x);
  if (sends.size() != recvs.size())
    return usage("send_recv", r, std::to_string(sends.size()) + " sends to this rank but " +
                                     std::to_string(recvs.size()) +
                                     " receives from it: a transfer to oneself needs both in the same batch");
  std::vector<std::pair<const Xfer*, const Xfer*>> pairs;
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i]->bytes != recvs[i]->bytes)
      return usage("send_recv", r, "a send of " + std::to_string(sends[i]->bytes) + " bytes to this rank meets a "
                                   "receive of " + std::to_string(recvs[i]->bytes) + " bytes from it");
    pairs.emplace_back(sends[i], recvs[i]);
  }
  return pairs;
}

Status copy_to_self(const std::vector<Xfer>& xs, int r) {
  ZW_ASSIGN_OR_RETURN(auto pairs, match_self(xs, r));
  for (const auto& [s, d] : pairs)
    if (s->bytes > 0 && s->mem.ptr != d->mem.ptr) kernels::copy(d->mem.ptr, s->mem.ptr, s->bytes);
  return Status();
}

internal::CommImpl::Task send_recv_task(std::vector<Xfer> xs, int r) {
  return [xs = std::move(xs), r](OpContext& ctx) -> Status {
    ZW_TRY(copy_to_self(xs, r));
    struct Live {
      const Xfer* x;
      uint64_t seq;     // number of this transfer within its (sender, receiver) pair
      BufRef buf;
      size_t iters;     // chunks
      size_t posted;    // receives: chunks whose clear-to-send is out
    };
    const size_t chunk = ctx.chunk_bytes;
    std::vector<Live> live;
    size_t iters = 0;
    for (const Xfer& x : xs) {
      if (x.peer == r) continue;
      // Numbered even when empty, so that both sides count the same transfers.
      uint64_t seq = x.kind == P2PKind::kSend ? ctx.rv.next_send_seq(x.peer) : ctx.rv.next_recv_seq(x.peer);
      if (x.bytes == 0) continue;
      ZW_ASSIGN_OR_RETURN(internal::RegBuf reg, ctx.registry.get(x.mem.slice(0, x.bytes)));
      Live l{&x, seq, BufRef{reg, reg.offset_of(x.mem.ptr)}, (x.bytes + chunk - 1) / chunk, 0};
      if (l.iters > 0xFFFFF)
        return usage(kind_name(x.kind), r, std::to_string(x.bytes) + " bytes need more than 2^20 chunks: raise "
                                                                      "ZW_CHUNK_BYTES");
      iters = std::max(iters, l.iters);
      live.push_back(l);
    }
    auto len_of = [&](const Live& l, size_t it) { return std::min(chunk, l.x->bytes - it * chunk); };
    auto tag = [](size_t it) { return internal::make_tag(internal::kPhaseP2P, 0, it); };
    for (size_t it = 0; it < iters; ++it) {
      for (Live& l : live) {
        if (l.x->kind != P2PKind::kRecv) continue;
        ctx.rv.use_seq(l.seq);
        for (; l.posted < std::min(l.iters, it + static_cast<size_t>(ctx.slots)); ++l.posted)
          ZW_TRY(ctx.rv.post_recv(l.x->peer, l.buf.reg, l.buf.base + l.posted * chunk, len_of(l, l.posted),
                                  tag(l.posted)));
      }
      for (Live& l : live) {
        if (l.x->kind != P2PKind::kSend || it >= l.iters) continue;
        ctx.rv.use_seq(l.seq);
        ZW_TRY(ctx.rv.send(l.x->peer, l.buf.reg, l.buf.base + it * chunk, len_of(l, it), tag(it)));
      }
      for (Live& l : live) {
        if (l.x->kind != P2PKind::kRecv || it >= l.iters) continue;
        ctx.rv.use_seq(l.seq);
        ZW_TRY(ctx.rv.wait_recv(l.x->peer, tag(it), len_of(l, it)));
      }
    }
    return Status();
  };
}

}  // namespace

namespace internal {

CommImpl::Task host_send_recv_task(const CommImpl& comm, std::span<const P2POp> ops) {
  std::vector<Xfer> xs;
  xs.reserve(ops.size());
  for (const P2POp& op : ops)
    xs.push_back(Xfer{op.kind, op.options.peer, op.kind == P2PKind::kSend ? op.options.input : op.options.output,
                      op.options.count * dtype_size(op.options.dtype)});
  return send_recv_task(std::move(xs), comm.rank());
}

}  // namespace internal

namespace {

// The op list of gather (to_root = true) or scatter through `root`.
std::vector<P2POp> rooted_ops(const Communicator& comm, const CollectiveOptions& o, bool to_root) {
  const int n = comm.size(), r = comm.rank();
  const size_t block = o.count * dtype_size(o.dtype);
  std::vector<P2POp> ops;
  P2POp mine{to_root ? P2PKind::kSend : P2PKind::kRecv, o};
  mine.options.peer = o.root;
  ops.push_back(mine);
  if (r != o.root) return ops;
  const MemRef& all = to_root ? o.output : o.input;
  for (int p = 0; p < n; ++p) {
    P2POp op{to_root ? P2PKind::kRecv : P2PKind::kSend, o};
    op.options.peer = p;
    (to_root ? op.options.output : op.options.input) = all.slice(block * p, block);  // sized by rooted()
    ops.push_back(op);
  }
  return ops;
}

Result<Work> rooted(Communicator& comm, const CollectiveOptions& o, bool to_root) {
  const char* name = to_root ? "gather" : "scatter";
  const int n = comm.size(), r = comm.rank();
  if (o.root < 0 || o.root >= n)
    return usage(name, r, "root " + std::to_string(o.root) + " is outside 0.." + std::to_string(n - 1));
  if (static_cast<int>(o.dtype) >= kNumDataTypes) return usage(name, r, "unknown data type");
  size_t total = 0;
  if (!internal::checked_bytes(o.count, o.dtype, uint64_t(n), &total))
    return usage(name, r, internal::overflow_text(o.count, o.dtype, uint64_t(n)));
  const size_t block = o.count * dtype_size(o.dtype);
  const MemRef& all = to_root ? o.output : o.input;
  if (r == o.root && block > 0 && (all.ptr == nullptr || all.bytes < total))
    return usage(name, r, std::string(to_root ? "output" : "input") + " on the root needs " + std::to_string(total) +
                              " bytes (size × count), it holds " + std::to_string(all.bytes));
  std::vector<P2POp> ops = rooted_ops(comm, o, to_root);
  return send_recv(comm, ops);
}

}  // namespace

Result<Work> send_recv(Communicator& comm, std::span<const P2POp> ops) {
  bool device = false;
  ZW_ASSIGN_OR_RETURN(std::vector<Xfer> xs, validate(comm, ops, &device));
  if (auto self = match_self(xs, comm.rank()); !self.ok()) return self.status();
  if (xs.empty()) return Work();
  if (device) return internal::run_gpu_send_recv(comm, ops);
  OpDesc desc{OpKind::kSendRecv, internal::Algo::kRing, ops[0].options.dtype, ReduceOp::kSum, 0, ops.size()};
  return comm.impl().enqueue(desc, ops[0].options.timeout, send_recv_task(std::move(xs), comm.rank()),
                             internal::CommImpl::RunBy::kWorkerOrWaiter);
}

Result<Work> send(Communicator& comm, const CollectiveOptions& options) {
  const P2POp op{P2PKind::kSend, options};
  return send_recv(comm, std::span<const P2POp>(&op, 1));
}

Result<Work> recv(Communicator& comm, const CollectiveOptions& options) {
  const P2POp op{P2PKind::kRecv, options};
  return send_recv(comm, std::span<const P2POp>(&op, 1));
}

Result<Work> gather(Communicator& comm, const CollectiveOptions& options) { return rooted(comm, options, true); }
Result<Work> scatter(Communicator& comm, const CollectiveOptions& options) { return rooted(comm, options, false); }

Result<Work> all_to_all(Communicator& comm, const CollectiveOptions& o) {
  const int n = comm.size(), r = comm.rank();
  // A refused call is announced to the peers, which would otherwise wait for it (refusal.h).
  auto refuse = [&](const std::string& what) {
    Status s = usage("all_to_all", r, what);
    internal::announce_refusal(comm, s);
    return s;
  };
  if (static_cast<int>(o.dtype) >= kNumDataTypes) return refuse("unknown data type");
  size_t total = 0;
  if (!internal::checked_bytes(o.count, o.dtype, uint64_t(n), &total))
    return refuse(internal::overflow_text(o.count, o.dtype, uint64_t(n)));
  for (const auto& [which, m] : {std::pair{"input", o.input}, std::pair{"output", o.output}}) {
    if (total == 0) break;
    if (m.ptr == nullptr) return refuse(std::string(which) + " buffer is null");
    if (m.bytes < total)
      return refuse(std::string(which) + " buffer holds " + std::to_string(m.bytes) + " bytes but size × count needs " +
                    std::to_string(total));
  }
  if (ranges_overlap(o.input.ptr, total, o.output.ptr, total))
    return refuse("input and output overlap (all_to_all has no in-place form)");
  if (total > 0 && o.input.kind != o.output.kind)
    return refuse("input and output are not both host or both device memory");
  OpDesc desc{OpKind::kAllToAll, internal::Algo::kRing, o.dtype, ReduceOp::kSum, 0, o.count};
  if (total > 0 && o.input.kind == MemKind::kCudaDevice) return internal::run_gpu_all_to_all(comm, desc, o);
  return comm.impl().enqueue(desc, o.timeout, internal::host_task(comm.impl(), desc, o),
                             internal::CommImpl::RunBy::kWorkerOrWaiter);
}

}  // namespace zw
