// zw_train/ds_config.h — --deepspeed_config as zw_train reads it, the way DeepSpeed and its Hugging Face
// integration do:
//   "auto" takes zw_train's flags where the integration takes its TrainingArguments (auto_fill): the batch triple
//   (--batch, --gradient-accumulation-steps), gradient_clipping (--grad-clip), fp16/bf16.enabled (--dtype), the
//   optimizer's lr (--lr), betas and eps (zw_train's AdamW: 0.9/0.95, 1e-8) and weight_decay (--weight-decay), the
//   scheduler's warmup_min_lr (0), warmup_max_lr (--lr), warmup_num_steps (--warmup-steps) and total_num_steps
//   (--steps), the bucket sizes from --d-model (d², 0.9·d², 10·d) and gather_16bit_weights_on_model_save (true);
//   every other "auto" is DeepSpeed's default.
//   Where the file and a flag both give a value, the file wins (DeepSpeed reads only the file; the integration
//   fills only "auto"), and the summary says which won.
//   The file's values replace the flags they correspond to: steps_per_print is the logging interval, the optimizer's
//   lr the peak of the schedule, the "scheduler" block the schedule (DeepSpeed's formulas; without one, zw_train's
//   warmup + cosine runs on the file's lr, as the integration runs its own scheduler), gradient_clipping the clip.
// Non-goals: ZeRO stages other than 3 (zw_train's --deepspeed_config trains with the ZeRO-3 engine).
#pragma once

#include <string>
#include <vector>

#include "zero/config/config.h"
#include "zerowire/status.h"
#include "zw_train/config.h"

namespace zw::train {

struct DsSetup {
  zero::ZeroConfig ds;             // the parsed file
  TrainConfig train;               // the flags with the file's values applied
  std::vector<std::string> lines;  // for the summary: every "auto", every flag the file overrode, every note
};

// zw_train's values for the "auto" keys of a DeepSpeed config.
zero::AutoFill auto_fill(const TrainConfig& c);

// The file's values over the flags they correspond to: steps_per_print -> log_every, gradient_clipping ->
// grad_clip, the optimizer's lr and weight_decay -> lr (the schedule's peak; min_lr keeps its share of it when the
// file has no scheduler) and weight_decay, the scheduler block -> ds_scheduler. Idempotent; run_zero_training
// applies it, so callers with a parsed config get the same run as zw_train.
void apply_ds_config(const zero::ZeroConfig& ds, TrainConfig* t);

// Parses the file at `path` for `world_size` ranks (`source` says where that number came from) and applies it.
Result<DsSetup> load_ds_config(const TrainConfig& c, const std::string& path, int world_size,
                               const std::string& source);

}  // namespace zw::train
