// Recursive-halving reduce-scatter (log-latency, for small messages), with the folding of tree_shape.h.
//
// A folded-away even rank sends its whole input to its odd partner and later receives its block of the
// result. The p virtual ranks then halve: each step a rank keeps the half of its current range that contains
// its own blocks, sends the other half of its partial sums to the partner, and adds the partner's partials
// of the kept half. Partial sums live in scratch (an accumulator and a receive area, each the vector's size);
// the first step reads the input directly, so nothing is copied in.
#include <cstring>

#include "collectives/algorithms/algorithms.h"
#include "kernels/reduce.h"
#include "collectives/algorithms/tree_shape.h"

namespace zw::internal {

Status tree_reduce_scatter(OpContext& ctx, const BufRef& in, const BufRef& out, const BlockLayout& layout,
                           DataType dtype, ReduceOp op) {
  const int n = ctx.size, r = ctx.rank;
  const size_t total = layout.total(), elem = dtype_size(dtype);
  if (n == 1) {
    if (out.at(0) != in.at(0)) kernels::copy(out.at(0), in.at(0), total);
    return Status();
  }
  const FoldedShape shape(n);
  if (shape.folded_away(r)) {
    ZW_TRY(ctx.rv.post_recv(r + 1, out.reg, out.base, layout.bytes(r), make_tag(kPhaseReduce, 62, 0)));
    ZW_TRY(ctx.rv.send(r + 1, in.reg, in.base, total, make_tag(kPhaseReduce, 0, 0)));
    return ctx.rv.wait_recv(r + 1, make_tag(kPhaseReduce, 62, 0), layout.bytes(r));
  }
  ZW_ASSIGN_OR_RETURN(RegBuf scratch, ctx.arena.get(2 * total));
  const BufRef acc{scratch, 0}, inbox{scratch, total};
  BufRef cur = in;  // where this rank's partial sums are: the input until the first reduction
  if (shape.has_partner(r)) {
    ZW_TRY(ctx.rv.post_recv(r - 1, inbox.reg, inbox.base, total, make_tag(kPhaseReduce, 0, 0)));
    ZW_TRY(ctx.rv.wait_recv(r - 1, make_tag(kPhaseReduce, 0, 0), total));
    kernels::reduce(dtype, op, acc.at(0), in.at(0), inbox.at(0), total / elem);
    cur = acc;
  }
  const int v = shape.virtual_rank(r);
  int lo = 0;  // first virtual rank whose blocks this rank still reduces (the range is 2·mask wide)
  auto bytes_of = [&](int vlo, int vhi, size_t* len) {
    size_t begin = layout.offset(shape.first_block(vlo));
    *len = layout.offset(shape.first_block(vhi)) - begin;
    return begin;
  };
  for (int mask = shape.p / 2, step = 1; mask >= 1; mask >>= 1, ++step) {
    int pv = v ^ mask, peer = shape.real_rank(pv);
    int mid = lo + mask;
    int keep_lo = v < mid ? lo : mid, give_lo = v < mid ? mid : lo;
    size_t keep_len, give_len;
    size_t keep_off = bytes_of(keep_lo, keep_lo + mask, &keep_len);
    size_t give_off = bytes_of(give_lo, give_lo + mask, &give_len);
    ZW_TRY(ctx.rv.post_recv(peer, inbox.reg, inbox.base, keep_len, make_tag(kPhaseReduce, step, 0)));
    ZW_TRY(ctx.rv.send(peer, cur.reg, cur.base + give_off, give_len, make_tag(kPhaseReduce, step, 0)));
    ZW_TRY(ctx.rv.wait_recv(peer, make_tag(kPhaseReduce, step, 0), keep_len));
    // The send above may still be reading `cur`; it never reads the kept half, which is all we write.
    kernels::reduce(dtype, op, acc.at(keep_off), cur.at(keep_off), inbox.at(0), keep_len / elem);
    cur = acc;
    lo = keep_lo;
  }
  if (shape.has_partner(r)) {
    ZW_TRY(ctx.rv.send(r - 1, acc.reg, acc.base + layout.offset(r - 1), layout.bytes(r - 1),
                       make_tag(kPhaseReduce, 62, 0)));
  }
  kernels::copy(out.at(0), acc.at(layout.offset(r)), layout.bytes(r));
  return Status();
}

}  // namespace zw::internal
