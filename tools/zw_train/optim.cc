// zw_train/optim.cc — LR schedule, gradient clipping and the checkpointable AdamW state.
//
// Non-goals: see optim.h.
#include "zw_train/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace zw::train {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return max_lr * double(step + 1) / double(warmup_steps);
  if (step >= total_steps || total_steps <= warmup_steps) return min_lr;
  const double ratio = double(step - warmup_steps) / double(total_steps - warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (max_lr - min_lr);
}

double global_norm(const float* grads, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += double(grads[i]) * double(grads[i]);
  return std::sqrt(sum);
}

double clip_by_global_norm(float* grads, size_t n, double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0;
  const double scale = max_norm / (norm + 1e-6);
  const float s = static_cast<float>(scale);
  for (size_t i = 0; i < n; ++i) grads[i] *= s;
  return scale;
}

void OptimizerState::reset(size_t numel) {
  m.assign(numel, 0.0f);
  v.assign(numel, 0.0f);
  step = 0;
}

void OptimizerState::update(const tensor::AdamWConfig& base, double lr, const tensor::GptLayout& layout, float* params,
                            const float* grads) {
  tensor::AdamWConfig c = base;
  c.lr = static_cast<float>(lr);
  ++step;
  for (const tensor::Unit& u : layout.units)
    for (const tensor::ParamSlot& s : u.slots) {
      const size_t off = u.offset + s.offset;
      tensor::adamw_update(c, step, s.weight_decay, params + off, grads + off, m.data() + off, v.data() + off,
                           size_t(s.numel()));
    }
}

}  // namespace zw::train
