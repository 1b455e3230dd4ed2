// collectives/gpu_path.h — where collectives on CUDA device memory go.
//
// collectives.cc validates arguments as for host buffers, then hands operations whose buffers are device memory
// to run_gpu_collective. With CUDA (gpu/gpu_comm.cc) it runs them on the caller's stream through the node-local
// cuda_ipc transport, or, when the ranks span several hosts (or ZW_CUDA_PATH=staged), through pinned host memory
// over the communicator's transport (gpu/gpu_staged.h); without CUDA (gpu_path_none.cc) it returns kUnsupported.
// Send/recv batches and all_to_all on device memory come here too (run_gpu_send_recv, run_gpu_all_to_all).
#pragma once

#include "collectives/op_desc.h"
#include "zerowire/communicator.h"

namespace zw::internal {

// `desc` is the validated operation (algo unused). Returns once the kernel is enqueued on options.stream.
Result<Work> run_gpu_collective(Communicator& comm, const OpDesc& desc, const CollectiveOptions& options);

// A validated send_recv batch / all_to_all on device memory (gpu/gpu_p2p.cc), enqueued on ops[0].options.stream /
// options.stream: transfers that stay on this rank are device copies; all_to_all on one node is a collective of the
// node-local engine (run_gpu_collective); other transfers between ranks are staged through pinned host memory by the
// communicator's p2p engine (gpu/gpu_staged.h). The call returns without waiting, except for a staged batch with a
// peer in this process (staged all_to_all: any other rank in this process), which is staged synchronously.
Result<Work> run_gpu_send_recv(Communicator& comm, std::span<const P2POp> ops);
Result<Work> run_gpu_all_to_all(Communicator& comm, const OpDesc& desc, const CollectiveOptions& options);

// A device-memory collective refused before the communicator's node-local engine exists (refusal.h): publishes `why`
// where the peers wait for this rank in the engine's creation. False where that does not apply: the engine exists
// (its mailbox announces refusals), the staged path (its operations take the host queue's numbers), no CUDA.
bool publish_gpu_refusal(Communicator& comm, const Status& why);

}  // namespace zw::internal
