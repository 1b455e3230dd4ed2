// zw_train/optim.h — the trainer's learning-rate schedule and the optimizer state a checkpoint carries.
//
// The update itself is tensor::FlatAdamW (tensor/adamw.h) on the model's device, with gradient unscaling and
// global-norm clipping folded into one factor computed on the device (tensor::grad_factor): see trainer.cc.
// The schedule is zw_train's warmup + cosine, or a DeepSpeed "scheduler" block (WarmupLR, WarmupDecayLR,
// WarmupCosineLR) computed by zero::scheduler_lr with DeepSpeed's formulas.
// Non-goals: other optimizers or schedules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zero/config/config.h"

namespace zw::train {

struct TrainConfig;

struct LrSchedule {
  LrSchedule() = default;
  LrSchedule(double max, double min, int warmup, int total, const zero::SchedulerConfig& deepspeed = {})
      : max_lr(max), min_lr(min), warmup_steps(warmup), total_steps(total), ds(deepspeed) {}
  double max_lr = 1e-3;      // peak, reached at the end of warmup (a DeepSpeed schedule: the optimizer's lr)
  double min_lr = 1e-4;      // floor of the cosine decay, reached at total_steps
  int warmup_steps = 0;      // linear ramp: step s < warmup gets max_lr * (s + 1) / warmup
  int total_steps = 1;       // cosine decay from max_lr (at warmup) to min_lr (at total_steps)
  zero::SchedulerConfig ds;  // type != kNone: DeepSpeed's schedule instead (zero::scheduler_lr of max_lr)
  // The learning rate of 0-based step `step`; steps at or past total_steps get min_lr.
  double at(int64_t step) const;
  // One line saying which schedule this is and its numbers.
  std::string describe() const;
};

// The schedule of a configuration: its DeepSpeed scheduler when it has one, else warmup + cosine from the flags.
LrSchedule make_schedule(const TrainConfig& c);

// AdamW moments and step counter over the layout's flat buffer, as a checkpoint holds them (host f32).
struct OptimizerState {
  std::vector<float> m, v;  // layout.total_numel each
  int64_t step = 0;         // updates taken (the next one is step + 1)
};

}  // namespace zw::train
