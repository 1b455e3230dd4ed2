// collectives/gpu_path_none.cc — run_gpu_collective in a build without CUDA: a clear error.
#include "collectives/gpu_path.h"

namespace zw::internal {

Result<Work> run_gpu_collective(Communicator& comm, const OpDesc& desc, const CollectiveOptions&) {
  return Status(Code::kUnsupported, std::string(op_kind_name(desc.kind)) + " on rank " + std::to_string(comm.rank()) +
                                        ": the buffers are CUDA device memory but this zerowire was built without "
                                        "CUDA support (no cuda toolkit or nvcc was found when it was configured)");
}

}  // namespace zw::internal
