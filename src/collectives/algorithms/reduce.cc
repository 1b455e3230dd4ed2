// Chunk-pipelined reduce up a binomial tree (log-latency) or a chain (bandwidth).
//
// For chunk i, a rank adds its children's partial sums (received into two alternating scratch slots per
// child) to its own input and sends the result to its parent; the root accumulates straight into its output.
// A leaf sends its input without copying. Receives for chunk i+1 are posted before waiting on chunk i.
#include "collectives/algorithms/algorithms.h"
#include "kernels/reduce.h"

namespace zw::internal {

Status reduce_pipelined(OpContext& ctx, Algo shape, int root, const BufRef& in, const BufRef& out, size_t count,
                        DataType dtype, ReduceOp op) {
  const size_t elem = dtype_size(dtype), bytes = count * elem;
  if (ctx.size == 1) {
    if (out.at(0) != in.at(0)) kernels::copy(out.at(0), in.at(0), bytes);
    return Status();
  }
  if (bytes == 0) return Status();
  const TreeLinks links = tree_links(shape, ctx.rank, ctx.size, root);
  const size_t chunk = ctx.chunk_bytes - ctx.chunk_bytes % elem;
  const size_t iters = (bytes + chunk - 1) / chunk;
  if (iters > 0xFFFFF)
    return Status(Code::kInvalidArgument, "reduce of " + std::to_string(bytes) +
                                              " bytes needs more than 2^20 chunks: raise ZW_CHUNK_BYTES");
  const size_t nchild = links.children.size();
  const bool is_root = links.parent < 0;
  // Scratch: [accumulator (non-root ranks with children)][2 slots per child].
  const size_t acc_bytes = (!is_root && nchild > 0) ? bytes : 0;
  ZW_ASSIGN_OR_RETURN(RegBuf scratch, ctx.arena.get(acc_bytes + 2 * nchild * chunk));
  const BufRef acc = is_root ? out : (nchild > 0 ? BufRef{scratch, 0} : in);
  auto slot = [&](size_t child, size_t it) { return acc_bytes + (2 * child + it % 2) * chunk; };
  auto len_of = [&](size_t it) { return std::min(chunk, bytes - it * chunk); };
  auto post = [&](size_t it) -> Status {
    for (size_t c = 0; c < nchild && it < iters; ++c)
      ZW_TRY(ctx.rv.post_recv(links.children[c], scratch, slot(c, it), len_of(it), make_tag(kPhaseReduce, 0, it)));
    return Status();
  };
  ZW_TRY(post(0));
  for (size_t it = 0; it < iters; ++it) {
    ZW_TRY(post(it + 1));
    const size_t off = it * chunk, len = len_of(it);
    for (size_t c = 0; c < nchild; ++c) {
      ZW_TRY(ctx.rv.wait_recv(links.children[c], make_tag(kPhaseReduce, 0, it), len));
      const std::byte* mine = c == 0 ? in.at(off) : acc.at(off);
      kernels::reduce(dtype, op, acc.at(off), mine, scratch.data() + slot(c, it), len / elem);
    }
    if (!is_root) ZW_TRY(ctx.rv.send(links.parent, acc.reg, acc.base + off, len, make_tag(kPhaseReduce, 0, it)));
  }
  return Status();
}

}  // namespace zw::internal
