// tensor/cuda_none.cc — the CUDA side of the tensor layer in builds without CUDA: no devices, and every device
// operation is kUnsupported, saying why.
//
// Non-goals: emulating device memory on the host.
#include <string>

#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda_context.h"

namespace zw::tensor {
namespace {

Status no_cuda(const char* what) {
  return Status(Code::kUnsupported,
                std::string(what) + ": this build of zerowire has no CUDA (configure with the CUDA toolkit and nvcc)");
}

thread_local CudaContext* g_current = nullptr;

}  // namespace

int cuda_device_count() { return 0; }
size_t cuda_bytes_in_use() { return 0; }
size_t cuda_bytes_peak() { return 0; }
void cuda_reset_peak() {}

struct CudaContext::Impl {};
CudaContext::CudaContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaContext::~CudaContext() = default;
Result<std::unique_ptr<CudaContext>> CudaContext::create(const CudaContextOptions&) { return no_cuda("CudaContext"); }
int CudaContext::device() const { return -1; }
void* CudaContext::stream() const { return nullptr; }
AttentionKernels CudaContext::attention() const { return AttentionKernels::kZerowire; }
LossRows CudaContext::loss_rows() const { return LossRows::kTwoPass; }
Determinism CudaContext::determinism() const { return Determinism::kDeterministic; }
MemRef CudaContext::scratch() const { return MemRef{}; }
DeviceError* CudaContext::error_slot() const { return nullptr; }
Status CudaContext::reserve_scratch(size_t) { return no_cuda("CudaContext::reserve_scratch"); }
Status CudaContext::synchronize() { return no_cuda("CudaContext::synchronize"); }
CudaContext* current_cuda_context() { return g_current; }
void CudaContext::set_profiling(bool) {}
bool CudaContext::profiling() const { return false; }
Status CudaContext::profile_collect() { return Status(); }
std::string CudaContext::profile_table(int64_t) const { return ""; }
ProfileRange::ProfileRange(const char*) {}
ProfileRange::~ProfileRange() {}
CudaScope::CudaScope(CudaContext& context) : previous_(g_current) { g_current = &context; }
CudaScope::~CudaScope() { g_current = previous_; }

namespace cuda {

Result<void*> device_alloc(size_t, int) { return no_cuda("device memory"); }
void device_free(void*, size_t, int) {}
Status zero(MemRef) { return no_cuda("zeroing device memory"); }
Status copy(const Tensor&, const Tensor&) { return no_cuda("copying device memory"); }
Status convert(const Tensor&, const Tensor&) { return no_cuda("convert on a device"); }
Status fill(const Tensor&, double) { return no_cuda("fill on a device"); }
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
Status linear_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { return no_cuda("linear_forward"); }
Status linear_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       GradInit) {
  return no_cuda("linear_backward");
}
Status linear_gelu_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return no_cuda("linear_gelu_forward");
}
Status linear_backward_gelu(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&) {
  return no_cuda("linear_backward_gelu");
}
Status gelu_forward(const Tensor&, const Tensor&) { return no_cuda("gelu_forward"); }
Status gelu_backward(const Tensor&, const Tensor&, const Tensor&, GradInit) { return no_cuda("gelu_backward"); }
Status residual_forward(const Tensor&, const Tensor&, const Tensor&) { return no_cuda("residual_forward"); }
Status residual_backward(const Tensor&, const Tensor&, const Tensor&, GradInit) { return no_cuda("residual_backward"); }
Status attention_forward(const Tensor&, const Tensor&, const Tensor&, int) { return no_cuda("attention_forward"); }
Status attention_prepare(DataType, int64_t, int64_t, int, int64_t) { return no_cuda("attention_prepare"); }
Status attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int,
                          GradInit) {
  return no_cuda("attention_backward");
}
Status cross_entropy_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return no_cuda("cross_entropy_forward");
}
Status cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, double, GradInit) {
  return no_cuda("cross_entropy_backward");
}
Status cross_entropy_forward_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double) {
  return no_cuda("cross_entropy_forward_backward");
}
Status reduce_sum(const Tensor&, const Tensor&, bool) { return no_cuda("reduce_sum"); }
Result<AdamWTable*> create_adamw_table(const std::vector<DecaySegment>&, int64_t, int) { return no_cuda("adamw"); }
void destroy_adamw_table(AdamWTable*) {}
Status adamw_step(const AdamWTable&, const AdamWConfig&, int64_t, const Tensor&, const Tensor&, const Tensor&,
                  const Tensor&, const Tensor&, const Tensor&) {
  return no_cuda("adamw");
}
Status grad_factor(const Tensor&, const Tensor&, double, double) { return no_cuda("grad_factor"); }

}  // namespace cuda
}  // namespace zw::tensor
