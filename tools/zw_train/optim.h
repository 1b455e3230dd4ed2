// zw_train/optim.h — the trainer's learning-rate schedule and the optimizer state a checkpoint carries.
//
// The update itself is tensor::FlatAdamW (tensor/adamw.h) on the model's device, with gradient unscaling and
// global-norm clipping folded into one factor computed on the device (tensor::grad_factor): see trainer.cc.
// Non-goals: other optimizers or schedules (the DeepSpeed "scheduler" block is the ZeRO path's business).
#pragma once

#include <cstdint>
#include <vector>

namespace zw::train {

struct LrSchedule {
  double max_lr = 1e-3;  // peak, reached at the end of warmup
  double min_lr = 1e-4;  // floor of the cosine decay, reached at total_steps
  int warmup_steps = 0;  // linear ramp: step s < warmup gets max_lr * (s + 1) / warmup
  int total_steps = 1;   // cosine decay from max_lr (at warmup) to min_lr (at total_steps)
  // The learning rate of 0-based step `step`; steps at or past total_steps get min_lr.
  double at(int64_t step) const;
};

// AdamW moments and step counter over the layout's flat buffer, as a checkpoint holds them (host f32).
struct OptimizerState {
  std::vector<float> m, v;  // layout.total_numel each
  int64_t step = 0;         // updates taken (the next one is step + 1)
};

}  // namespace zw::train
