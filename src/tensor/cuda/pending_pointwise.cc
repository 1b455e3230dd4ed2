// tensor/cuda/pending_pointwise.cc — TEMPORARY: kUnsupported stand-ins for CUDA ops not written yet (the pointwise-kernels helper
// deletes each function here as its real implementation lands, and this file once it is empty).
#include <string>

#include "tensor/cuda/cuda_ops.h"

namespace zw::tensor::cuda {
namespace {
Status no_cuda(const char* what) { return Status(Code::kUnsupported, std::string(what) + ": not implemented on CUDA yet"); }
}  // namespace

Status embedding_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return no_cuda("embedding_forward");
}
Status embedding_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return no_cuda("embedding_backward");
}
Status layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return no_cuda("layernorm_forward");
}
Status layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, GradInit) {
  return no_cuda("layernorm_backward");
}
Status residual_layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, const Tensor&, const Tensor&) {
  return no_cuda("residual_layernorm_forward");
}
Status gelu_forward(const Tensor&, const Tensor&) { return no_cuda("gelu_forward"); }
Status gelu_backward(const Tensor&, const Tensor&, const Tensor&, GradInit) { return no_cuda("gelu_backward"); }
Status residual_forward(const Tensor&, const Tensor&, const Tensor&) { return no_cuda("residual_forward"); }
Status residual_backward(const Tensor&, const Tensor&, const Tensor&, GradInit) { return no_cuda("residual_backward"); }
Status cross_entropy_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return no_cuda("cross_entropy_forward");
}
Status cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, double, GradInit) {
  return no_cuda("cross_entropy_backward");
}
Status cross_entropy_forward_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double) {
  return no_cuda("cross_entropy_forward_backward");
}

}  // namespace zw::tensor::cuda
