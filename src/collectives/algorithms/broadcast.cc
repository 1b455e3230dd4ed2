// Chunk-pipelined broadcast down a binomial tree (log-latency) or a chain (bandwidth).
//
// Each non-root rank receives chunk i from its parent straight into its output and forwards it to its
// children while later chunks are still arriving; receives are posted up to `slots` chunks ahead.
#include "collectives/algorithms/algorithms.h"

namespace zw::internal {

Status broadcast_pipelined(OpContext& ctx, Algo shape, int root, const BufRef& src, const BufRef& dst, size_t bytes) {
  if (ctx.size == 1 || bytes == 0) return Status();
  const TreeLinks links = tree_links(shape, ctx.rank, ctx.size, root);
  const size_t chunk = ctx.chunk_bytes;
  const size_t iters = (bytes + chunk - 1) / chunk;
  if (iters > 0xFFFFF)
    return Status(Code::kInvalidArgument, "broadcast of " + std::to_string(bytes) +
                                              " bytes needs more than 2^20 chunks: raise ZW_CHUNK_BYTES");
  auto len_of = [&](size_t it) { return std::min(chunk, bytes - it * chunk); };
  const BufRef& from = ctx.rank == root ? src : dst;
  size_t posted = 0;
  for (size_t it = 0; it < iters; ++it) {
    if (links.parent >= 0) {
      for (; posted < std::min(iters, it + static_cast<size_t>(ctx.slots)); ++posted)
        ZW_TRY(ctx.rv.post_recv(links.parent, dst.reg, dst.base + posted * chunk, len_of(posted),
                                make_tag(kPhaseRoot, 0, posted)));
      ZW_TRY(ctx.rv.wait_recv(links.parent, make_tag(kPhaseRoot, 0, it), len_of(it)));
    }
    for (int child : links.children)
      ZW_TRY(ctx.rv.send(child, from.reg, from.base + it * chunk, len_of(it), make_tag(kPhaseRoot, 0, it)));
  }
  return Status();
}

}  // namespace zw::internal
