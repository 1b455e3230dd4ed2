// zw_train/checkpoint.h — crash-safe checkpoints of the reference trainer.
//
// A checkpoint is one file, <dir>/state.zwckpt:
//   "ZWCKPT1\n" | u64 meta_len | meta JSON | u64 numel | params f32[numel] | m f32[numel] | v f32[numel] | u64 fnv1a
// The meta JSON holds the model config, the training config, the step, the data sampler's RNG state, the data
// fingerprint, the elapsed time and (fp16 runs) the loss scaler's state; the trailing hash covers every byte before
// it. Parameters and moments are the f32 master copies whatever device trained them, so a checkpoint written on a
// GPU loads on the CPU path and back. Saving writes
// <dir>/state.zwckpt.tmp, fsyncs it, renames it over state.zwckpt and fsyncs the directory, so a process killed
// at any point leaves either the previous checkpoint or the new one — never a torn file under the real name.
// Loading verifies magic, sizes and the hash and says which file is bad and why.
// Non-goals: sharded (ZeRO) checkpoints, keeping a history of checkpoints, cross-endian portability.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zerowire/status.h"
#include "zw_train/optim.h"

namespace zw::train {

inline constexpr const char* kCheckpointFile = "state.zwckpt";

struct CheckpointMeta {
  nlohmann::json model;           // GptConfig as JSON (see config.h)
  nlohmann::json train;           // TrainConfig as JSON, for information and resume checks
  int64_t step = 0;               // optimizer steps taken
  uint64_t data_rng = 0;          // SplitMix state of the batch sampler after `step` batches
  uint64_t data_fingerprint = 0;  // Dataset::fingerprint() of the data it was trained on
  double elapsed_s = 0.0;         // training wall time so far
  std::string loss_scaler;        // zero::LossScaler::to_json() of an fp16 run ("" otherwise)
  int64_t optimizer_steps = -1;   // AdamW updates taken (fewer than step after fp16 overflows); -1: = step
};

// Test hook: when >= 0, save_checkpoint writes this many bytes of the temporary file, flushes them and calls
// std::abort() — a process killed half-way through a checkpoint.
struct CheckpointFault {
  int64_t abort_after_bytes = -1;
};

// params, m and v: numel host floats each.
Status save_checkpoint(const std::string& dir, const CheckpointMeta& meta, const float* params, const float* m,
                       const float* v, size_t numel, const CheckpointFault& fault = {});

struct LoadedCheckpoint {
  CheckpointMeta meta;
  std::vector<float> params;  // numel
  OptimizerState opt;         // m, v (numel each); opt.step == meta.step
};
Result<LoadedCheckpoint> load_checkpoint(const std::string& dir);
bool checkpoint_exists(const std::string& dir);

}  // namespace zw::train
