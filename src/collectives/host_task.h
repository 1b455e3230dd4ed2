// collectives/host_task.h — the worker-side task of a collective over host memory, built from its description.
//
// The public collectives (collectives.cc) validate their arguments, describe the operation (OpDesc) and enqueue
// host_task(...) on the communicator's worker. Other paths that end in host memory reuse the same tasks: the staged
// device-memory engine (gpu/gpu_staged.h) runs them on pinned copies of device buffers, one task per pipeline chunk,
// and a send/recv batch's task (host_send_recv_task, p2p.cc) on pinned copies of a device batch.
// Non-goals: validation (the caller has done it; the task assumes consistent arguments), device memory.
#pragma once

#include "collectives/comm_impl.h"
#include "collectives/op_desc.h"
#include "zerowire/communicator.h"

namespace zw::internal {

// The task the worker runs for `desc` over the host buffers of `o`, on a communicator of comm.size() ranks where
// this is comm.rank(). `o` must satisfy what the public function of desc.kind checks (buffer sizes, in-place rules,
// root; o.count == desc.count, o.dtype == desc.dtype, o.op == desc.op, o.root == desc.root). The buffers must stay
// valid until the task has run. o.timeout and o.stream are not used.
CommImpl::Task host_task(const CommImpl& comm, const OpDesc& desc, const CollectiveOptions& o);

// The task of a send_recv batch over host buffers (p2p.cc): `ops` as zw::send_recv accepts them (sends to this rank
// matched by receives from it), every non-empty buffer host memory that stays valid until the task has run. Enqueue
// it under OpDesc{kSendRecv, ...}: transfers are numbered per pair of ranks, not in the collective sequence.
CommImpl::Task host_send_recv_task(const CommImpl& comm, std::span<const P2POp> ops);

}  // namespace zw::internal
