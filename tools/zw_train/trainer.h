// zw_train/trainer.h — the reference single-process GPT trainer on the tensor layer.
//
// One step: draw a batch, zero the flat gradient buffer, forward + backward through GptModel, take the global
// gradient norm over all gradients and clip, AdamW update (betas 0.9/0.95, eps 1e-8 as in GPT-2/nanoGPT; decay on
// the layout's decaying slots) with the scheduled LR (warmup + cosine), then log,
// evaluate and checkpoint as configured. Parameters, gradients and AdamW state are single flat buffers in the
// GptLayout's order. Deterministic: the same config and data give the same losses bit for bit (fixed OpenBLAS
// thread count, seeded init and sampling, no unordered reductions), and a run resumed from a checkpoint continues
// with exactly the losses of an uninterrupted run.
// Threading: call from one thread; OpenBLAS uses config.threads threads inside gemm.
// Non-goals: multiple processes or ZeRO sharding (src/zero does that), gradient accumulation, mixed precision.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "zerowire/status.h"
#include "zw_train/config.h"

namespace zw::train {

struct TrainReport {
  int64_t first_step = 0;                              // steps already taken when this run started (resume)
  std::vector<float> losses;                           // training loss of each step this run took
  std::vector<std::pair<int64_t, double>> val_losses;  // (step, validation loss)
  double tokens_per_s = 0;                             // median over this run's steps
  bool reporter = true;                                // prints the summary (rank 0 of a ZeRO run)
};

// Trains as configured: loads data, initializes or resumes, runs to config.steps (or config.stop_after more
// steps), writes out_dir/metrics.jsonl and out_dir/ckpt. Prints progress to stdout unless config.quiet.
Result<TrainReport> run_training(const TrainConfig& config);

}  // namespace zw::train
