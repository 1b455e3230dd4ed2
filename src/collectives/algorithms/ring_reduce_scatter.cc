// Pipelined ring reduce-scatter.
//
// Iteration `it` handles chunk slice `it` of every block. At step s a rank sends its partial sum of block
// (r-s-1) to the next rank; the previous rank's partial of block (r-s-2) lands in one of `slots` scratch slots,
// is reduced with this rank's input in place, and forwarded at the next step. The last step reduces straight
// into the output. A slot is re-posted only after its forwarded write completed locally, so the sender's
// data is never overwritten in flight. Step 0 sends from the input itself (no copy). A hook (all_reduce's direct
// gather) hears of each iteration before it starts and of each slice of the result as it becomes final. With
// ZW_HOST_THREADS > 1 a large chunk's reduction is shared with helper threads (common/helper_pool.h).
#include "collectives/algorithms/algorithms.h"
#include "common/helper_pool.h"
#include "kernels/reduce.h"

namespace zw::internal {
namespace {

// State of one ring reduce-scatter call; keeps the step functions short.
class RingReduceScatter {
 public:
  RingReduceScatter(OpContext& ctx, const BufRef& in, const BufRef& out, const BlockLayout& layout, DataType dtype,
                    ReduceOp op, ReduceScatterHook* hook)
      : ctx_(ctx), in_(in), out_(out), layout_(layout), dtype_(dtype), op_(op), hook_(hook), n_(ctx.size),
        r_(ctx.rank) {
    elem_ = dtype_size(dtype);
    chunk_ = ctx.chunk_bytes - ctx.chunk_bytes % elem_;
    steps_ = static_cast<size_t>(n_ - 1);
    iters_ = (layout.max_block() + chunk_ - 1) / chunk_;
    total_ = iters_ * steps_;
    slots_ = static_cast<size_t>(ctx.slots);
    tickets_.assign(slots_, 0);
  }

  Status run() {
    if (iters_ > 0xFFFFF)
      return Status(Code::kInvalidArgument, "reduce_scatter block of " + std::to_string(layout_.max_block()) +
                                                " bytes needs more than 2^20 chunks: raise ZW_CHUNK_BYTES");
    ZW_ASSIGN_OR_RETURN(RegBuf scratch, ctx_.arena.get(slots_ * chunk_));
    scratch_ = BufRef{scratch, 0};
    const int next = (r_ + 1) % n_, prev = (r_ + n_ - 1) % n_;
    for (size_t it = 0; it < iters_; ++it) {
      if (hook_) ZW_TRY(hook_->before(it, chunk_));
      ZW_TRY(top_up(prev));
      size_t len;
      size_t off = slice(block_sent_at(0), it, &len);
      ZW_TRY(ctx_.rv.send(next, in_.reg, in_.base + off, len, make_tag(kPhaseReduce, 0, it)));
      for (size_t s = 1; s < steps_; ++s) {
        size_t k = it * steps_ + s - 1;  // the receive item carrying the block we forward now
        off = slice(block_sent_at(s), it, &len);
        ZW_TRY(ctx_.rv.wait_recv(prev, make_tag(kPhaseReduce, s - 1, it), len));
        std::byte* partial = scratch_.at((k % slots_) * chunk_);
        reduce(partial, partial, in_.at(off), len);
        ++consumed_;
        ZW_TRY(ctx_.rv.send(next, scratch_.reg, (k % slots_) * chunk_, len, make_tag(kPhaseReduce, s, it),
                            &tickets_[k % slots_]));
        ZW_TRY(top_up(prev));
      }
      // Last step: the previous rank's partial of our own block, reduced into the output.
      size_t k = it * steps_ + steps_ - 1;
      off = slice(r_, it, &len);
      ZW_TRY(ctx_.rv.wait_recv(prev, make_tag(kPhaseReduce, steps_ - 1, it), len));
      reduce(out_.at(off - layout_.offset(r_)), scratch_.at((k % slots_) * chunk_), in_.at(off), len);
      tickets_[k % slots_] = 0;
      ++consumed_;
      if (hook_) ZW_TRY(hook_->reduced(it, off - layout_.offset(r_), len));
    }
    return Status();
  }

 private:
  int block_sent_at(size_t s) const { return static_cast<int>((r_ + 2 * n_ - 1 - s) % n_); }
  int block_received_at(size_t s) const { return static_cast<int>((r_ + 2 * n_ - 2 - s) % n_); }

  size_t slice(int b, size_t it, size_t* len) const { return layout_.slice(b, it, chunk_, len); }

  // Posts receives into free slots: item k may use slot k % slots once item k - slots was consumed and
  // its forwarded write finished.
  Status top_up(int prev) {
    for (; posted_ < total_ && posted_ < consumed_ + slots_; ++posted_) {
      size_t slot = posted_ % slots_;
      if (tickets_[slot] != 0) {
        ZW_TRY(ctx_.rv.wait_write((r_ + 1) % n_, tickets_[slot]));
        tickets_[slot] = 0;
      }
      size_t it = posted_ / steps_, s = posted_ % steps_, len;
      slice(block_received_at(s), it, &len);
      ZW_TRY(ctx_.rv.post_recv(prev, scratch_.reg, slot * chunk_, len, make_tag(kPhaseReduce, s, it)));
    }
    return Status();
  }

  // out = a (op) b over `bytes`; a large one shared with the helper threads (ZW_HOST_THREADS, common/helper_pool.h).
  void reduce(std::byte* out, const std::byte* a, const std::byte* b, size_t bytes) const {
    HelperPool::instance().split(bytes, 64, HelperPool::Job::kMapped, [&](size_t o, size_t n) {
      kernels::reduce(dtype_, op_, out + o, a + o, b + o, n / elem_);
    });
  }

  OpContext& ctx_;
  BufRef in_, out_, scratch_;
  const BlockLayout& layout_;
  DataType dtype_;
  ReduceOp op_;
  ReduceScatterHook* hook_;
  int n_, r_;
  size_t elem_, chunk_, steps_, iters_, total_, slots_;
  size_t posted_ = 0, consumed_ = 0;
  std::vector<uint64_t> tickets_;  // per slot: the forwarded write still reading it (0 = none)
};

}  // namespace

Status ring_reduce_scatter(OpContext& ctx, const BufRef& in, const BufRef& out, const BlockLayout& layout,
                           DataType dtype, ReduceOp op, ReduceScatterHook* hook) {
  if (ctx.size == 1) {
    if (hook) ZW_TRY(hook->before(0, layout.bytes(0)));
    kernels::copy(out.at(0), in.at(layout.offset(0)), layout.bytes(0));
    return hook ? hook->reduced(0, 0, layout.bytes(0)) : Status();
  }
  return RingReduceScatter(ctx, in, out, layout, dtype, op, hook).run();
}

}  // namespace zw::internal
