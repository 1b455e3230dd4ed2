// Pipelined ring all-gather.
//
// Every block is cut into chunk slices; iteration `it` moves slice `it` of every block one hop per step, so
// after n-1 steps each rank has received slice `it` of all blocks, and iteration it+1 starts on the wire while
// later hops of iteration `it` are still travelling. Receives land straight in the output (zero copy): the
// receiver posts clear-to-send for up to `slots` iterations ahead. Over shm with at most 4 ranks the work goes to
// direct_all_gather instead (direct_all_gather.cc says why).
#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/direct_all_gather.h"

namespace zw::internal {

Status ring_all_gather(OpContext& ctx, const BufRef& out, const BlockLayout& layout) {
  const int n = ctx.size, r = ctx.rank;
  if (n == 1) return Status();
  if (use_direct_all_gather(ctx)) return direct_all_gather(ctx, out, layout);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const size_t chunk = ctx.chunk_bytes;
  const size_t iters = (layout.max_block() + chunk - 1) / chunk;
  const size_t steps = static_cast<size_t>(n - 1);
  const size_t total = iters * steps;  // receive items, ordered (iteration, step)
  const size_t window = static_cast<size_t>(ctx.slots) * steps;
  if (iters > 0xFFFFF)
    return Status(Code::kInvalidArgument, "all_gather block of " + std::to_string(layout.max_block()) +
                                              " bytes needs more than 2^20 chunks: raise ZW_CHUNK_BYTES");

  auto slice = [&](int b, size_t it, size_t* len) { return layout.slice(b, it, chunk, len); };
  auto recv_block = [&](size_t step) { return static_cast<int>((r + 2 * n - 1 - step) % n); };
  size_t posted = 0;
  auto top_up = [&](size_t upto) -> Status {
    for (; posted < std::min(upto, total); ++posted) {
      size_t it = posted / steps, s = posted % steps, len;
      size_t off = slice(recv_block(s), it, &len);
      ZW_TRY(ctx.rv.post_recv(prev, out.reg, out.base + off, len, make_tag(kPhaseGather, s, it)));
    }
    return Status();
  };

  for (size_t it = 0; it < iters; ++it) {
    for (size_t s = 0; s < steps; ++s) {
      ZW_TRY(top_up(it * steps + s + window));
      int send_block = static_cast<int>((r + n - s % n) % n);
      size_t len;
      size_t off = slice(send_block, it, &len);
      // From step 1 on, the slice we forward is the one received at the previous step.
      if (s > 0) ZW_TRY(ctx.rv.wait_recv(prev, make_tag(kPhaseGather, s - 1, it), len));
      ZW_TRY(ctx.rv.send(next, out.reg, out.base + off, len, make_tag(kPhaseGather, s, it)));
    }
  }
  ZW_TRY(top_up(total));
  for (size_t it = 0; it < iters; ++it) {
    size_t len;
    slice(recv_block(steps - 1), it, &len);
    ZW_TRY(ctx.rv.wait_recv(prev, make_tag(kPhaseGather, steps - 1, it), len));
  }
  return Status();
}

}  // namespace zw::internal
