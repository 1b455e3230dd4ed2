// A collective refused on one rank only (a usage error found in the caller's thread) leaves the other ranks waiting
// in an operation that rank will never join, until ZW_TIMEOUT. So the refusing rank announces it: a marker takes the
// refused call's place in its issue order, and when its turn comes it tells every peer "operation #N refused: why"
// (a REFUSE control message). A peer running (or later starting) operation #N fails at once naming the rank and its
// reason; a peer that refused #N itself (every rank made the same mistake) ignores it, so a symmetric usage error
// leaves the communicator usable.
// Device-memory collectives on the node-local CUDA IPC path take their own numbers, not the host queue's: a refusal
// of such a call is posted in the GPU descriptor mailbox instead (GpuEngine::refuse, cuda_ipc_mailbox.h), where the
// peers waiting for this rank's descriptor read it; a rank whose GPU path failed earlier posts one for every later
// call, and so does a call that fails before its descriptor went out (a buffer CUDA IPC cannot export, a CUDA error),
// so its peers fail naming it instead of waiting until their timeout.
// Non-goals: send/recv batches (only the ranks they name take part) announce nothing; nor does a refusal of a rank's
// first device-memory call before its GPU engine exists (the peers then wait in the engine's creation).
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

// Queues the announcement that this rank refused a collective call with `why` (a world of one: nothing to tell);
// `device`: the call's buffers are device memory (see above).
void announce_refusal(Communicator& comm, const Status& why, bool device = false);

}  // namespace zw::internal
