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
#include "collectives/direct_all_gather.h"

#include <cstring>

#include "common/knobs.h"

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

}  // namespace zw::internal
