// zw_train/metrics.h — the trainer's outputs for people and plots: progress lines and metrics.jsonl.
//
// metrics.jsonl holds one JSON object per line: {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "elapsed"} per
// training step and {"step", "val_loss", "elapsed"} per evaluation (step = optimizer steps taken). On resume the
// lines past the checkpoint's step are dropped, so the file reads as one uninterrupted run.
// Non-goals: TensorBoard or other formats, buffering across crashes (each line is flushed).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "zerowire/status.h"

namespace zw::train {

struct StepRecord {
  int64_t step = 0;         // optimizer steps taken, 1-based
  double loss = 0;          // training loss of this step's batch
  double lr = 0;            // learning rate used
  double grad_norm = 0;     // global norm before clipping
  double tokens_per_s = 0;  // this step's throughput
  double mfu = 0;           // model FLOPs utilization of this step, percent (0: not reported, e.g. on the CPU)
  double elapsed_s = 0;     // training wall time so far
};

class MetricsLog {
 public:
  MetricsLog() = default;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog();
  // Opens `path` fresh, or (keep_through_step >= 0) keeps only its lines with step <= keep_through_step.
  Status open(const std::string& path, int64_t keep_through_step);
  void step(const StepRecord& r);
  void val(int64_t step, double val_loss, double elapsed_s);

 private:
  std::FILE* f_ = nullptr;
};

// "step 12/500 | loss 2.3456 | lr 1.00e-03 | norm 0.812 | 10234 tok/s | MFU 41.2% | elapsed 1m02s | eta 3m10s"
// (the MFU field only when it is reported).
std::string progress_line(const StepRecord& r, int64_t total_steps, double eta_s);
std::string format_duration(double seconds);

}  // namespace zw::train
