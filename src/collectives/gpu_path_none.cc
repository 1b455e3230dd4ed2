// collectives/gpu_path_none.cc — run_gpu_collective in a build without CUDA: a clear error (on every rank alike, so
// nothing is announced).
#include "collectives/gpu_path.h"

namespace zw::internal {
namespace {

Status no_cuda(const char* op, int rank) {
  return Status(Code::kUnsupported, std::string(op) + " on rank " + std::to_string(rank) +
                                        ": the buffers are CUDA device memory but this zerowire was built without "
                                        "CUDA support (no cuda toolkit or nvcc was found when it was configured)");
}

}  // namespace

Result<Work> run_gpu_collective(Communicator& comm, const OpDesc& desc, const CollectiveOptions&) {
  return no_cuda(op_kind_name(desc.kind), comm.rank());
}

Result<Work> run_gpu_send_recv(Communicator& comm, std::span<const P2POp>) { return no_cuda("send_recv", comm.rank()); }

Result<Work> run_gpu_all_to_all(Communicator& comm, const OpDesc&, const CollectiveOptions&) {
  return no_cuda("all_to_all", comm.rank());
}

bool publish_gpu_refusal(Communicator&, const Status&) { return false; }

}  // namespace zw::internal
