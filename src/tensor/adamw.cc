// tensor/adamw.cc — scalar AdamW over the GPT layout.
//
// Non-goals: see adamw.h.
#include "tensor/adamw.h"

#include <cmath>
#include <string>

namespace zw::tensor {

void adamw_update(const AdamWConfig& c, int64_t step, bool decay, float* params, const float* grads, float* m, float* v,
                  size_t n) {
  const double bc1 = 1.0 - std::pow(double(c.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(c.beta2), double(step));
  const float step_size = static_cast<float>(double(c.lr) / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay_factor = decay ? 1.0f - c.lr * c.weight_decay : 1.0f;
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + c.eps;
    params[i] = params[i] * decay_factor - step_size * m[i] / denom;
  }
}

Result<AdamW> AdamW::create(const AdamWConfig& config, const GptLayout& layout) {
  AdamW opt;
  opt.config_ = config;
  opt.layout_ = &layout;
  ZW_ASSIGN_OR_RETURN(opt.m_, Buffer::allocate_host(layout.total_numel * sizeof(float)));
  ZW_ASSIGN_OR_RETURN(opt.v_, Buffer::allocate_host(layout.total_numel * sizeof(float)));
  return opt;
}

Status AdamW::step(const Tensor& params, const Tensor& grads) {
  if (layout_ == nullptr) return Status(Code::kInvalidArgument, "adamw: not created");
  const int64_t n = int64_t(layout_->total_numel);
  for (const Tensor* t : {&params, &grads})
    if (t->dtype != DataType::kFloat32 || !t->on_host() || t->numel() != n)
      return Status(Code::kInvalidArgument,
                    "adamw: expected host f32 buffers of " + std::to_string(n) + " elements, got " + t->describe());
  ++step_;
  float* p = params.data<float>();
  const float* g = grads.data<float>();
  float* m = reinterpret_cast<float*>(m_.ref().data());
  float* v = reinterpret_cast<float*>(v_.ref().data());
  for (const Unit& u : layout_->units)
    for (const ParamSlot& s : u.slots) {
      const size_t off = u.offset + s.offset;
      adamw_update(config_, step_, s.weight_decay, p + off, g + off, m + off, v + off, size_t(s.numel()));
    }
  return Status();
}

}  // namespace zw::tensor
