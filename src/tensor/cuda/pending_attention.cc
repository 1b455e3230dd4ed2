// tensor/cuda/pending_attention.cc — TEMPORARY: kUnsupported stand-ins for CUDA ops not written yet (the attention helper
// deletes each function here as its real implementation lands, and this file once it is empty).
#include <string>

#include "tensor/cuda/cuda_ops.h"

namespace zw::tensor::cuda {
namespace {
Status no_cuda(const char* what) { return Status(Code::kUnsupported, std::string(what) + ": not implemented on CUDA yet"); }
}  // namespace

Status attention_forward(const Tensor&, const Tensor&, const Tensor&, int) { return no_cuda("attention_forward"); }
Status attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int,
                          GradInit) {
  return no_cuda("attention_backward");
}

}  // namespace zw::tensor::cuda
