// zero/offload/offload_pipeline_none.cc — make_cuda_tile_copier in a build without CUDA: device memory is refused.
//
// Non-goals: any device support (see offload_pipeline_cuda.cc).
#include "zero/offload/offload_pipeline.h"

namespace zw::zero {

Result<std::unique_ptr<TileCopier>> make_cuda_tile_copier(int device, void* stream) {
  return Status(Code::kUnsupported,
                "offload pipeline: the gradient or the 16-bit weights are CUDA device memory but "
                "this build has no CUDA; rebuild with the CUDA toolkit (nvcc) found");
}

}  // namespace zw::zero
