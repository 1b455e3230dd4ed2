// collectives/gpu_path.h — where collectives on CUDA device memory go.
//
// collectives.cc validates arguments as for host buffers, then hands operations whose buffers are device memory
// to run_gpu_collective. With CUDA (gpu/gpu_comm.cc) it runs them on the caller's stream through the node-local
// cuda_ipc transport, or, when the ranks span several hosts (or ZW_CUDA_PATH=staged), through pinned host memory
// over the communicator's transport (gpu/gpu_staged.h); without CUDA (gpu_path_none.cc) it returns kUnsupported.
#pragma once

#include "collectives/op_desc.h"
#include "zerowire/communicator.h"

namespace zw::internal {

// `desc` is the validated operation (algo unused). Returns once the kernel is enqueued on options.stream.
Result<Work> run_gpu_collective(Communicator& comm, const OpDesc& desc, const CollectiveOptions& options);

}  // namespace zw::internal
