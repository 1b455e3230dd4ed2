// A collective refused on one rank only (a usage error found in the caller's thread) leaves the other ranks waiting
// in an operation that rank will never join, until ZW_TIMEOUT. So the refusing rank announces it: a marker takes the
// refused call's place in its issue order, and when its turn comes it tells every peer "operation #N refused: why"
// (a REFUSE control message). A peer running (or later starting) operation #N fails at once naming the rank and its
// reason; a peer that refused #N itself (every rank made the same mistake) ignores it, so a symmetric usage error
// leaves the communicator usable.
// Non-goals: device-memory collectives on the CUDA IPC path (they do not take the host queue's numbers) and
// send/recv batches (only the ranks they name take part) announce nothing.
#pragma once

#include "collectives/op_desc.h"
#include "zerowire/status.h"

namespace zw {
class Communicator;
}

namespace zw::internal {

// The description a refusal marker runs under: a barrier with a count no barrier has. Peers never compare it.
inline OpDesc refusal_desc() {
  return OpDesc{OpKind::kBarrier, Algo::kTree, DataType::kUInt8, ReduceOp::kSum, 0, ~0ull};
}
inline bool is_refusal(const OpDesc& d) { return d.kind == OpKind::kBarrier && d.count == ~0ull; }

// Queues the announcement that this rank refused a collective call with `why` (a world of one: nothing to tell).
void announce_refusal(Communicator& comm, const Status& why);

}  // namespace zw::internal
