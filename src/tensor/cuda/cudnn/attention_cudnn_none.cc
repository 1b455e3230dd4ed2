// tensor/cuda/cudnn/attention_cudnn_none.cc — the cuDNN attention path of builds without cuDNN or its frontend
// headers (cmake/cudnn.cmake says which was missing): it takes no call, so attention.cu runs zerowire's kernels.
#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cudnn/attention_cudnn.h"

namespace zw::tensor::cuda {

void destroy_dnn_state(DnnState*) {}

namespace dnn {
namespace {
constexpr const char* kWhy =
    "this build has no cuDNN attention (cuDNN or the cudnn-frontend headers were not found "
    "at configure time: see tools/cudnn-frontend.sh)";
}  // namespace

bool built() { return false; }
std::string describe() { return kWhy; }

Result<bool> prepare(DataType, int64_t, int64_t, int, int64_t, std::string* why_not) {
  *why_not = kWhy;
  return false;
}
Result<bool> attention_forward(const Tensor&, const Tensor&, const Tensor&, int, std::string* why_not) {
  *why_not = kWhy;
  return false;
}
Result<bool> attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int, bool,
                                std::string* why_not) {
  *why_not = kWhy;
  return false;
}

}  // namespace dnn
}  // namespace zw::tensor::cuda
