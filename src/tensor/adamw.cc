// tensor/adamw.cc — AdamW over flat buffers: the scalar reference update, the gradient factor, and FlatAdamW's
// host loop or CUDA kernel.
//
// Non-goals: see adamw.h.
#include "tensor/adamw.h"

#include <cmath>
#include <string>

#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda_context.h"

namespace zw::tensor {

void adamw_update(const AdamWConfig& c, int64_t step, bool decay, float* params, const float* grads, float* m, float* v,
                  size_t n, float grad_scale) {
  const double bc1 = 1.0 - std::pow(double(c.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(c.beta2), double(step));
  const float step_size = static_cast<float>(double(c.lr) / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay_factor = decay ? 1.0f - c.lr * c.weight_decay : 1.0f;
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + c.eps;
    params[i] = params[i] * decay_factor - step_size * m[i] / denom;
  }
}

namespace {

Status check_scalar(const char* op, const char* name, const Tensor& t, MemKind kind, int device) {
  if (!t.defined() || t.dtype != DataType::kFloat32 || t.numel() != 1 || t.mem.kind != kind ||
      (kind == MemKind::kCudaDevice && t.mem.device != device))
    return Status(Code::kInvalidArgument, std::string(op) + ": " + name + " is " + t.describe() + ", expected f32[1] on " +
                                              (kind == MemKind::kHost ? "the host" : "CUDA device " + std::to_string(device)));
  return Status();
}


}  // namespace

Status grad_factor(const Tensor& factor, const Tensor& sumsq, double max_norm, double inv_loss_scale) {
  const MemKind kind = sumsq.mem.kind;
  ZW_TRY(check_scalar("grad_factor", "sumsq", sumsq, kind, sumsq.mem.device));
  ZW_TRY(check_scalar("grad_factor", "factor", factor, kind, sumsq.mem.device));
  if (kind == MemKind::kCudaDevice) {
    ZW_TRY(require_cuda_context("grad_factor: sumsq", sumsq.mem.device));
    return cuda::grad_factor(factor, sumsq, max_norm, inv_loss_scale);
  }
  const double s = sumsq.data<float>()[0];
  if (!std::isfinite(s)) {
    factor.data<float>()[0] = NAN;
    return Status();
  }
  const double norm = std::sqrt(s) * inv_loss_scale;
  const double clip = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
  factor.data<float>()[0] = static_cast<float>(inv_loss_scale * clip);
  return Status();
}

FlatAdamW::FlatAdamW() = default;
FlatAdamW::FlatAdamW(FlatAdamW&&) noexcept = default;
FlatAdamW& FlatAdamW::operator=(FlatAdamW&&) noexcept = default;
FlatAdamW::~FlatAdamW() = default;

void FlatAdamW::TableDeleter::operator()(void* table) const {
  cuda::destroy_adamw_table(static_cast<cuda::AdamWTable*>(table));
}

Result<FlatAdamW> FlatAdamW::create(std::vector<DecaySegment> segments, int64_t numel, MemKind kind, int device) {
  for (const DecaySegment& s : segments)
    if (s.offset < 0 || s.numel < 0 || s.offset + s.numel > numel)
      return Status(Code::kInvalidArgument, "adamw: segment [" + std::to_string(s.offset) + ", +" +
                                                std::to_string(s.numel) + ") is outside the " + std::to_string(numel) +
                                                "-element buffer");
  FlatAdamW opt;
  opt.numel_ = numel;
  opt.kind_ = kind;
  ZW_ASSIGN_OR_RETURN(opt.m_, OwnedTensor::zeros(DataType::kFloat32, Shape{numel}, kind, device));
  ZW_ASSIGN_OR_RETURN(opt.v_, OwnedTensor::zeros(DataType::kFloat32, Shape{numel}, kind, device));
  if (kind == MemKind::kCudaDevice) {
    ZW_ASSIGN_OR_RETURN(cuda::AdamWTable * table, cuda::create_adamw_table(segments, numel, device));
    opt.table_.reset(table);
  }
  opt.segments_ = std::move(segments);
  return opt;
}

Status FlatAdamW::step(const AdamWConfig& config, int64_t step, const Tensor& params, const Tensor& grads,
                       const Tensor& params16, const Tensor& factor) {
  if (step < 1) return Status(Code::kInvalidArgument, "adamw: the step count starts at 1, got " + std::to_string(step));
  const int device = m_.tensor().mem.device;
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"params", &params}, {"grads", &grads}})
    if (t->dtype != DataType::kFloat32 || t->numel() != numel_ || t->mem.kind != kind_ ||
        (kind_ == MemKind::kCudaDevice && t->mem.device != device))
      return Status(Code::kInvalidArgument, std::string("adamw: ") + name + " is " + t->describe() + ", expected f32[" +
                                                std::to_string(numel_) + "] on the optimizer's device");
  if (params16.defined() &&
      ((params16.dtype != DataType::kBFloat16 && params16.dtype != DataType::kFloat16) || params16.numel() != numel_ ||
       params16.mem.kind != kind_))
    return Status(Code::kInvalidArgument, "adamw: params16 is " + params16.describe() + ", expected bf16 or f16[" +
                                              std::to_string(numel_) + "] on the optimizer's device");
  ZW_TRY(check_scalar("adamw", "grad_factor", factor, kind_, device));
  if (kind_ == MemKind::kCudaDevice) {
    ZW_TRY(require_cuda_context("adamw: params", device));
    return cuda::adamw_step(*static_cast<const cuda::AdamWTable*>(table_.get()), config, step, params, grads,
                            m_.tensor(), v_.tensor(), params16, factor);
  }
  const float f = factor.data<float>()[0];
  if (!std::isfinite(f)) return Status();  // overflow: the caller skips this step
  float* p = params.data<float>();
  const float* g = grads.data<float>();
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (const DecaySegment& s : segments_)
    adamw_update(config, step, s.decay, p + s.offset, g + s.offset, m + s.offset, v + s.offset, size_t(s.numel), f);
  if (params16.defined()) {
    for (const DecaySegment& s : segments_) {
      ZW_ASSIGN_OR_RETURN(const Tensor src, params.narrow(s.offset, s.numel));
      ZW_ASSIGN_OR_RETURN(const Tensor dst, params16.narrow(s.offset, s.numel));
      ZW_TRY(convert(src, dst));
    }
  }
  return Status();
}

}  // namespace zw::tensor
