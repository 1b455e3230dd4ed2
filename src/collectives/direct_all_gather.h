// Direct (one-step) all-gather: every rank writes its block straight into every peer (direct_all_gather.cc).
// ring_all_gather and tree_all_gather hand their work to it where use_direct_all_gather says so; the choice
// depends only on the world size and the transport, so every rank makes the same one.
#pragma once

#include "collectives/algorithms.h"

namespace zw::internal {

// Whether all-gathers of this communicator go direct (shm, 2..4 ranks).
bool use_direct_all_gather(const OpContext& ctx);
// `out` already holds this rank's block; on return it holds every block.
Status direct_all_gather(OpContext& ctx, const BufRef& out, const BlockLayout& layout);

}  // namespace zw::internal
