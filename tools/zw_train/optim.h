// zw_train/optim.h — the trainer's optimizer pieces: LR schedule, global-norm gradient clipping, and AdamW state
// that a checkpoint can save and restore.
//
// The update math is the tensor layer's adamw_update (PyTorch AdamW, the layout's GPT-2 decay rule). The trainer
// keeps its own m/v/step here rather than using tensor::AdamW because that class neither exposes its state (needed
// for checkpoints) nor takes a per-step learning rate (needed for the schedule).
// Non-goals: SIMD or threaded updates, other optimizers, loss scaling.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/adamw.h"
#include "tensor/gpt_layout.h"

namespace zw::train {

struct LrSchedule {
  double max_lr = 1e-3;  // peak, reached at the end of warmup
  double min_lr = 1e-4;  // floor of the cosine decay, reached at total_steps
  int warmup_steps = 0;  // linear ramp: step s < warmup gets max_lr * (s + 1) / warmup
  int total_steps = 1;   // cosine decay from max_lr (at warmup) to min_lr (at total_steps)
  // The learning rate of 0-based step `step`; steps at or past total_steps get min_lr.
  double at(int64_t step) const;
};

// sqrt(sum of squares) over n floats, accumulated in double in index order (deterministic).
double global_norm(const float* grads, size_t n);
// Scales grads by max_norm / norm when norm > max_norm > 0 (norm as returned by global_norm). Returns the factor.
double clip_by_global_norm(float* grads, size_t n, double norm, double max_norm);

// AdamW moments and step counter over the layout's flat buffer.
struct OptimizerState {
  std::vector<float> m, v;  // layout.total_numel each
  int64_t step = 0;         // updates taken (the next one is step + 1)

  void reset(size_t numel);
  // One update of every slot of the layout with learning rate `lr` (hyperparameters other than lr from `base`).
  void update(const tensor::AdamWConfig& base, double lr, const tensor::GptLayout& layout, float* params,
              const float* grads);
};

}  // namespace zw::train
