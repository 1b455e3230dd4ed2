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
// so its peers fail naming it instead of waiting until their timeout. A refusal before the rank's engine exists (its
// first device-memory call, or every call since an attempt to create it failed) is published in the store where the
// peers' creation of the engine waits for this rank's record (gpu_path.h: publish_gpu_refusal); the next call makes a
// new attempt under keys of its own on every rank, so the device path stays usable.
// Non-goals: send/recv batches (only the ranks they name take part) announce nothing; nor does a rank whose engine
// could not be created for another reason (a CUDA error in its set-up: the peers wait for it until their timeout,
// which names it).
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
