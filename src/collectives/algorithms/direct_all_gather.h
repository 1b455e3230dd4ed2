// Direct (one-step) all-gather: every rank writes its block straight into every peer (direct_all_gather.cc).
// ring_all_gather and tree_all_gather hand their work to it where use_direct_all_gather says so; the choice
// depends only on the world size and the transport, so every rank makes the same one.
#pragma once

#include "collectives/algorithms/algorithms.h"

namespace zw::internal {

// Whether all-gathers of this communicator go direct (shm, 2..4 ranks).
bool use_direct_all_gather(const OpContext& ctx);
// `out` already holds this rank's block; on return it holds every block.
Status direct_all_gather(OpContext& ctx, const BufRef& out, const BlockLayout& layout);
// all_reduce where all-gathers go direct: the ring reduce-scatter of `in`, each slice of this rank's block sent to
// every peer as soon as its sum is final (`user_op` kAvg: scaled first). `out` is the whole vector.
Status all_reduce_direct_gather(OpContext& ctx, const BufRef& in, const BufRef& out, const BlockLayout& layout,
                                DataType dtype, ReduceOp op, ReduceOp user_op);

}  // namespace zw::internal
