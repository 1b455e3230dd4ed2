// zw_train/optim.cc — the warmup + cosine learning-rate schedule.
//
// Non-goals: see optim.h.
#include "zw_train/optim.h"

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

}  // namespace zw::train
