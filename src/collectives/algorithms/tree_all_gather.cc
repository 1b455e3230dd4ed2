// Recursive-doubling all-gather (log-latency, for small messages).
//
// With p the largest power of two ≤ n and rem = n - p, the first 2·rem ranks pair up: each even one hands
// its block to its odd neighbour, which then stands for both (virtual rank r/2) while the remaining ranks
// are virtual ranks r - rem. The p virtual ranks double their gathered range each step (log2 p steps, all
// receives straight into the output); finally each odd rank of a pair sends the whole result to its even
// partner. Steps: log2(p) + 2 when n is not a power of two. Over shm with at most 4 ranks the work goes to
// direct_all_gather instead (one step; direct_all_gather.cc says why).
#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/direct_all_gather.h"
#include "collectives/algorithms/tree_shape.h"

namespace zw::internal {

Status tree_all_gather(OpContext& ctx, const BufRef& out, const BlockLayout& layout) {
  const int n = ctx.size, r = ctx.rank;
  if (n == 1) return Status();
  if (use_direct_all_gather(ctx)) return direct_all_gather(ctx, out, layout);
  const FoldedShape shape(n);
  const size_t total = layout.total();
  auto range = [&](int vlo, int vhi, size_t* len) {  // bytes of the blocks virtual ranks [vlo, vhi) hold
    size_t begin = layout.offset(shape.first_block(vlo));
    *len = layout.offset(shape.first_block(vhi)) - begin;  // first_block(p) == n
    return begin;
  };

  if (shape.folded_away(r)) {  // even rank of a pair: hand over the block, get everything back at the end
    size_t before = layout.offset(r), after = layout.offset(r + 1);
    ZW_TRY(ctx.rv.post_recv(r + 1, out.reg, out.base, before, make_tag(kPhaseGather, 62, 0)));
    ZW_TRY(ctx.rv.post_recv(r + 1, out.reg, out.base + after, total - after, make_tag(kPhaseGather, 62, 1)));
    ZW_TRY(ctx.rv.send(r + 1, out.reg, out.base + before, layout.bytes(r), make_tag(kPhaseGather, 0, 0)));
    ZW_TRY(ctx.rv.wait_recv(r + 1, make_tag(kPhaseGather, 62, 0), before));
    return ctx.rv.wait_recv(r + 1, make_tag(kPhaseGather, 62, 1), total - after);
  }
  if (shape.has_partner(r)) {
    ZW_TRY(ctx.rv.post_recv(r - 1, out.reg, out.base + layout.offset(r - 1), layout.bytes(r - 1),
                            make_tag(kPhaseGather, 0, 0)));
    ZW_TRY(ctx.rv.wait_recv(r - 1, make_tag(kPhaseGather, 0, 0), layout.bytes(r - 1)));
  }
  const int v = shape.virtual_rank(r);
  for (int mask = 1, step = 1; mask < shape.p; mask <<= 1, ++step) {
    int pv = v ^ mask, peer = shape.real_rank(pv);
    int mine = v & ~(mask - 1), theirs = pv & ~(mask - 1);
    size_t my_len, their_len;
    size_t my_off = range(mine, mine + mask, &my_len);
    size_t their_off = range(theirs, theirs + mask, &their_len);
    ZW_TRY(ctx.rv.post_recv(peer, out.reg, out.base + their_off, their_len, make_tag(kPhaseGather, step, 0)));
    ZW_TRY(ctx.rv.send(peer, out.reg, out.base + my_off, my_len, make_tag(kPhaseGather, step, 0)));
    ZW_TRY(ctx.rv.wait_recv(peer, make_tag(kPhaseGather, step, 0), their_len));
  }
  if (shape.has_partner(r)) {
    size_t before = layout.offset(r - 1), after = layout.offset(r);
    ZW_TRY(ctx.rv.send(r - 1, out.reg, out.base, before, make_tag(kPhaseGather, 62, 0)));
    ZW_TRY(ctx.rv.send(r - 1, out.reg, out.base + after, total - after, make_tag(kPhaseGather, 62, 1)));
  }
  return Status();
}

}  // namespace zw::internal
