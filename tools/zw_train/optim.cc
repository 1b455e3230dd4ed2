// zw_train/optim.cc — the warmup + cosine learning-rate schedule, or a DeepSpeed scheduler block.
//
// Non-goals: see optim.h.
#include "zw_train/optim.h"

#include <cmath>
#include <cstdio>
#include <numbers>

#include "zw_train/config.h"

namespace zw::train {

double LrSchedule::at(int64_t step) const {
  if (ds.type != zero::SchedulerType::kNone) return zero::scheduler_lr(ds, max_lr, step);
  if (step < warmup_steps) return max_lr * double(step + 1) / double(warmup_steps);
  if (step >= total_steps || total_steps <= warmup_steps) return min_lr;
  const double ratio = double(step - warmup_steps) / double(total_steps - warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (max_lr - min_lr);
}

std::string LrSchedule::describe() const {
  char buf[320];
  const char* warmup = ds.warmup_type == zero::WarmupType::kLog ? "log" : "linear";
  switch (ds.type) {
    case zero::SchedulerType::kNone:
      std::snprintf(buf, sizeof buf, "warmup + cosine: linear warmup over %d steps to %g, cosine to %g at step %d",
                    warmup_steps, max_lr, min_lr, total_steps);
      break;
    case zero::SchedulerType::kWarmupLR:
      std::snprintf(buf, sizeof buf, "DeepSpeed WarmupLR: %s warmup over %lld steps from %g to %g, then constant",
                    warmup, (long long)ds.warmup_num_steps, ds.warmup_min_lr,
                    ds.warmup_max_lr >= 0 ? ds.warmup_max_lr : max_lr);
      break;
    case zero::SchedulerType::kWarmupDecayLR:
      std::snprintf(buf, sizeof buf,
                    "DeepSpeed WarmupDecayLR: %s warmup over %lld steps from %g to %g, linear decay to step %lld",
                    warmup, (long long)ds.warmup_num_steps, ds.warmup_min_lr, ds.warmup_max_lr,
                    (long long)ds.total_num_steps);
      break;
    case zero::SchedulerType::kWarmupCosineLR:
      std::snprintf(
          buf, sizeof buf,
          "DeepSpeed WarmupCosineLR: %s warmup over %lld steps from %g x to 1 x of %g, cosine to %g x at step "
          "%lld",
          warmup, (long long)ds.warmup_num_steps, ds.warmup_min_ratio, max_lr, ds.cos_min_ratio,
          (long long)ds.total_num_steps);
      break;
  }
  return buf;
}

LrSchedule make_schedule(const TrainConfig& c) {
  return LrSchedule(c.lr, c.min_lr, c.warmup_steps, c.steps, c.ds_scheduler);
}

}  // namespace zw::train
