// zero/config/lr_schedule.cc — DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR as functions of the step,
// written from deepspeed/runtime/lr_schedules.py (0.19) and checked against its values
// (tests/zero/config/deepspeed_lr_table.json). DeepSpeed's engine builds the scheduler before the first step (which
// sets the "not started" rate: warmup_min_lr, or 0 for WarmupCosineLR) and steps it after every applied optimizer
// step, so update k (0-based) uses the schedule at iteration last_batch_iteration + k.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "zero/config/config.h"

namespace zw::zero {
namespace {

// The warmup fraction in [0, 1) at iteration `it` < warmup (DeepSpeed's gamma / ratio before scaling).
double warmup_fraction(const SchedulerConfig& s, int64_t it) {
  const int64_t warmup = std::max<int64_t>(2, s.warmup_num_steps);
  if (s.warmup_type == WarmupType::kLinear) return double(it) / double(warmup);
  return std::log(double(it + 1)) * (1.0 / std::log(double(warmup)));
}

double warmup_lr_at(const SchedulerConfig& s, double optimizer_lr, int64_t it) {
  const double max_lr = s.warmup_max_lr >= 0 ? s.warmup_max_lr : optimizer_lr;
  const int64_t warmup = std::max<int64_t>(2, s.warmup_num_steps);
  double gamma = 1.0;
  if (it < warmup) {
    gamma = warmup_fraction(s, it);
  } else if (s.type == SchedulerType::kWarmupDecayLR) {
    gamma = std::max(0.0, double(s.total_num_steps - it) / std::max(1.0, double(s.total_num_steps - warmup)));
  }
  return s.warmup_min_lr + (max_lr - s.warmup_min_lr) * gamma;
}

double cosine_ratio_at(const SchedulerConfig& s, int64_t it) {
  const int64_t warmup = std::max<int64_t>(2, s.warmup_num_steps);
  if (it < warmup) return s.warmup_min_ratio + warmup_fraction(s, it) * (1.0 - s.warmup_min_ratio);
  const double done = double(it - warmup + 1);
  const double total = double(std::max<int64_t>(1, s.total_num_steps - warmup));
  const double progress = std::min(1.0, done / total);
  const double cosine = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
  return std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
}

}  // namespace

double scheduler_lr(const SchedulerConfig& s, double optimizer_lr, int64_t step) {
  if (s.type == SchedulerType::kNone) return optimizer_lr;
  // Resumed (last_batch_iteration >= 0): DeepSpeed does not touch the rate until the first step() after it.
  if (s.last_batch_iteration >= 0 && step == 0) return optimizer_lr;
  const int64_t it = s.last_batch_iteration + step;
  const bool cosine = s.type == SchedulerType::kWarmupCosineLR;
  if (it < 0) return cosine ? 0.0 : s.warmup_min_lr;  // "before the scheduler has started"
  return cosine ? optimizer_lr * cosine_ratio_at(s, it) : warmup_lr_at(s, optimizer_lr, it);
}

}  // namespace zw::zero
