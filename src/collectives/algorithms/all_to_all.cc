// Direct all-to-all: block p of this rank's input goes straight into block r of rank p's output.
//
// Every block is cut into chunks; iteration `it` sends chunk `it` of every block to its rank (peers in the order
// r+1, r+2, ... so that not every rank writes to rank 0 first) and then waits for chunk `it` from every peer.
// Receives land in the output (zero copy), posted `slots` iterations ahead, so every rank has posted the
// clear-to-send a peer's send of iteration `it` needs before it blocks anywhere in that iteration.
// Non-goals: hierarchical or Bruck-style schedules for many ranks and tiny blocks (a later selector's job).
#include "collectives/algorithms/algorithms.h"
#include "kernels/reduce.h"

namespace zw::internal {

Status direct_all_to_all(OpContext& ctx, const BufRef& in, const BufRef& out, size_t block) {
  const int n = ctx.size, r = ctx.rank;
  if (block == 0) return Status();
  kernels::copy(out.at(static_cast<size_t>(r) * block), in.at(static_cast<size_t>(r) * block), block);
  if (n == 1) return Status();
  const size_t chunk = ctx.chunk_bytes;
  const size_t iters = (block + chunk - 1) / chunk;
  if (iters > 0xFFFFF)
    return Status(Code::kInvalidArgument, "all_to_all block of " + std::to_string(block) +
                                              " bytes needs more than 2^20 chunks: raise ZW_CHUNK_BYTES");
  auto len_of = [&](size_t it) { return std::min(chunk, block - it * chunk); };
  auto peer_at = [&](int k) { return (r + k) % n; };  // k = 1..n-1
  size_t posted = 0;
  for (size_t it = 0; it < iters; ++it) {
    for (; posted < std::min(iters, it + static_cast<size_t>(ctx.slots)); ++posted)
      for (int k = 1; k < n; ++k) {
        const int p = peer_at(n - k);  // receive from r-1, r-2, ...: the peers whose first send targets this rank
        ZW_TRY(ctx.rv.post_recv(p, out.reg, out.base + static_cast<size_t>(p) * block + posted * chunk,
                                len_of(posted), make_tag(kPhaseGather, 0, posted)));
      }
    for (int k = 1; k < n; ++k) {
      const int p = peer_at(k);
      ZW_TRY(ctx.rv.send(p, in.reg, in.base + static_cast<size_t>(p) * block + it * chunk, len_of(it),
                         make_tag(kPhaseGather, 0, it)));
    }
    for (int k = 1; k < n; ++k) ZW_TRY(ctx.rv.wait_recv(peer_at(n - k), make_tag(kPhaseGather, 0, it), len_of(it)));
  }
  return Status();
}

}  // namespace zw::internal
