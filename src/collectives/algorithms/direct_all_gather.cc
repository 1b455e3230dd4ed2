// Direct (one-step) all-gather for small worlds over shared memory: every rank posts one receive per peer for
// that peer's whole block, then writes its own block straight into every peer's output, then waits for the n-1
// blocks. One clear-to-send and one notify per pair and operation, no step depends on another, and every
// write reads the sender's own block (in its cache since the local copy) instead of forwarding a block another
// core wrote.
//
// Why only shm and few ranks (use_direct_all_gather): on the 2-core hosts we measure on, the ring's n-1
// dependent steps each cost a wake-up of the next rank, and the ring's 1 MiB chunks each cost a clear-to-send
// round trip; with few ranks the direct pattern moves the same bytes with neither. Sends go to r+1, r+2, ... so
// that at each moment every rank writes into a different peer.
// Non-goals: large worlds (n-1 concurrent writers per receiver), transports other than shm (tcp sends from the
// caller's thread and was not measured with this pattern), chunk pipelining (nothing is forwarded).
//
// all_reduce gathers the same way, but slice by slice as the ring reduce-scatter finishes them: a reduce-scatter
// followed by an all-gather reads the whole block back from memory (it left the cache long ago) and waits for the
// slowest rank's last slice before any gathering starts; sent at once, each slice is read while it is still in
// cache and the gather overlaps the reduction. Every peer posts the receives of iteration `it` before its own
// iteration `it` waits for anything, and a rank's slice `it` is final only once every peer's slice `it` passed
// through that peer's iteration `it`: the sends never wait for a receive that is not coming.
#include "collectives/algorithms/direct_all_gather.h"

#include <cstring>

#include "common/knobs.h"
#include "kernels/reduce.h"

namespace zw::internal {
namespace {

// Step field of the direct all-gather's tag: apart from the ring's and the tree's steps.
constexpr unsigned kDirectStep = 0x3FFF0;

}  // namespace

bool use_direct_all_gather(const OpContext& ctx) {
  // ZW_SHM_DIRECT_AG_MAX_RANKS: the largest world that gathers directly (0 or 1: never).
  return ctx.size > 1 && ctx.size <= knobs().shm_direct_ag_max_ranks &&
         std::strcmp(ctx.rv.transport_name(), "shm") == 0;
}

Status direct_all_gather(OpContext& ctx, const BufRef& out, const BlockLayout& layout) {
  const int n = ctx.size, r = ctx.rank;
  const uint64_t tag = make_tag(kPhaseGather, kDirectStep, 0);
  // Rank r-k writes to this rank at its k-th send: post the receives in that order.
  for (int k = 1; k < n; ++k) {
    const int p = (r + n - k) % n;
    ZW_TRY(ctx.rv.post_recv(p, out.reg, out.base + layout.offset(p), layout.bytes(p), tag));
  }
  for (int k = 1; k < n; ++k)
    ZW_TRY(ctx.rv.send((r + k) % n, out.reg, out.base + layout.offset(r), layout.bytes(r), tag));
  for (int k = 1; k < n; ++k) {
    const int p = (r + n - k) % n;
    ZW_TRY(ctx.rv.wait_recv(p, tag, layout.bytes(p)));
  }
  return Status();
}

namespace {

// The gather half of all_reduce_direct_gather, driven by the reduce-scatter's hook.
class DirectGather final : public ReduceScatterHook {
 public:
  DirectGather(OpContext& ctx, const BufRef& out, const BlockLayout& layout, DataType dtype, bool avg)
      : ctx_(ctx), out_(out), layout_(layout), dtype_(dtype), avg_(avg), n_(ctx.size), r_(ctx.rank) {}

  Status before(size_t it, size_t chunk) override {
    chunk_ = chunk;
    iters_ = it + 1;
    for (int k = 1; k < n_; ++k) {  // rank r-k sends to this rank at its k-th send
      const int p = (r_ + n_ - k) % n_;
      size_t len;
      const size_t off = slice(p, it, &len);
      ZW_TRY(ctx_.rv.post_recv(p, out_.reg, out_.base + off, len, tag(it)));
    }
    return Status();
  }

  Status reduced(size_t it, size_t offset, size_t len) override {
    const size_t at = layout_.offset(r_) + offset;
    if (avg_) kernels::scale(dtype_, out_.at(at), out_.at(at), len / dtype_size(dtype_), 1.0 / n_);
    for (int k = 1; k < n_; ++k) ZW_TRY(ctx_.rv.send((r_ + k) % n_, out_.reg, out_.base + at, len, tag(it)));
    return Status();
  }

  // After the reduce-scatter: every peer's slices.
  Status finish() {
    for (size_t it = 0; it < iters_; ++it)
      for (int k = 1; k < n_; ++k) {
        const int p = (r_ + n_ - k) % n_;
        size_t len;
        slice(p, it, &len);
        ZW_TRY(ctx_.rv.wait_recv(p, tag(it), len));
      }
    return Status();
  }

 private:
  static uint64_t tag(size_t it) { return make_tag(kPhaseGather, kDirectStep, it); }
  // Slice `it` of block b, as the reduce-scatter cuts it.
  size_t slice(int b, size_t it, size_t* len) const { return layout_.slice(b, it, chunk_, len); }

  OpContext& ctx_;
  BufRef out_;
  const BlockLayout& layout_;
  DataType dtype_;
  bool avg_;
  int n_, r_;
  size_t chunk_ = 0, iters_ = 0;
};

}  // namespace

Status all_reduce_direct_gather(OpContext& ctx, const BufRef& in, const BufRef& out, const BlockLayout& layout,
                                DataType dtype, ReduceOp op, ReduceOp user_op) {
  DirectGather gather(ctx, out, layout, dtype, user_op == ReduceOp::kAvg);
  const BufRef mine{out.reg, out.base + layout.offset(ctx.rank)};
  ZW_TRY(ring_reduce_scatter(ctx, in, mine, layout, dtype, op, &gather));
  return gather.finish();
}

}  // namespace zw::internal
