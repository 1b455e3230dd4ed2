// tensor/cuda/pending_core.cc — TEMPORARY: kUnsupported stand-ins for CUDA ops not written yet (the cuBLASLt/optimizer helper
// deletes each function here as its real implementation lands, and this file once it is empty).
#include <string>

#include "tensor/cuda/cuda_ops.h"

namespace zw::tensor::cuda {
namespace {
Status no_cuda(const char* what) { return Status(Code::kUnsupported, std::string(what) + ": not implemented on CUDA yet"); }
}  // namespace

Status convert(const Tensor&, const Tensor&) { return no_cuda("convert on a device"); }
Status fill(const Tensor&, double) { return no_cuda("fill on a device"); }
Status linear_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { return no_cuda("linear_forward"); }
Status linear_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       GradInit) {
  return no_cuda("linear_backward");
}
Status reduce_sum(const Tensor&, const Tensor&, bool) { return no_cuda("reduce_sum"); }
Result<AdamWTable*> create_adamw_table(const std::vector<DecaySegment>&, int64_t, int) { return no_cuda("adamw"); }
void destroy_adamw_table(AdamWTable*) {}
Status adamw_step(const AdamWTable&, const AdamWConfig&, int64_t, const Tensor&, const Tensor&, const Tensor&,
                  const Tensor&, const Tensor&, const Tensor&) {
  return no_cuda("adamw");
}
Status grad_factor(const Tensor&, const Tensor&, double, double) { return no_cuda("grad_factor"); }

struct BlasPlans {};
void destroy_blas_plans(BlasPlans* plans) { delete plans; }

}  // namespace zw::tensor::cuda
