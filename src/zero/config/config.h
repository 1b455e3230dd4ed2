// zero/config/config.h — the ZeRO-3 engine's configuration, read from a DeepSpeed JSON file.
//
// A DeepSpeed config (the `ds_config.json` users already have) loads as is, with DeepSpeed's code defaults for
// every key it leaves out. The parse is strict where DeepSpeed is lax, because a silently ignored key is a
// silently wrong training run: an unknown key is an error that suggests the nearest valid key with its JSON
// path; a known DeepSpeed option that zerowire does not implement (ZeRO stages 1 and 2, NVMe offload, ZeRO++
// quantization, fp16.auto_cast, ...) is an error saying so and what to write instead. One parse reports every
// problem of a file, in file order. Keys that only tune performance in a way zerowire does differently
// (allgather_bucket_size, sub_group_size 0, wall_clock_breakdown, ...) are accepted with one note each
// (ZeroConfig::notes). "auto" means what it means to DeepSpeed and its Hugging Face integration: the keys the
// integration fills from its arguments (the batch sizes, gradient_clipping, fp16/bf16.enabled, the optimizer's
// lr/betas/eps/weight_decay, the scheduler's warmup_min_lr/warmup_max_lr/warmup_num_steps/total_num_steps, and
// the hidden-size-based bucket sizes) take the caller's AutoFill; every other "auto" is DeepSpeed's default;
// ZeroConfig::autos records what each became. Integer keys accept JSON doubles such as 5e8 when the value is a
// whole number and reject 5.5 rather than round it. Supported ZeRO stages: 0 (plain data parallel) and 3.
//
// Non-goals: writing configs back out, DeepSpeed's deprecated top-level spellings other than those listed in
// the parser, and any key outside the groups below (they fail as unsupported or unknown).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "zerowire/status.h"

namespace zw::zero {

// train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × world_size.
struct BatchConfig {
  int64_t train_batch_size = 0;             // global batch per optimizer step
  int64_t micro_batch_per_gpu = 0;          // train_micro_batch_size_per_gpu
  int64_t gradient_accumulation_steps = 0;  // micro batches per optimizer step
  int world_size = 0;                       // data-parallel ranks, given by the caller
  std::string world_size_source;            // where world_size came from ("ZW_WORLD_SIZE=4 from zwrun")
  std::set<std::string> inferred;           // names of the three keys computed rather than read
  std::string filled;  // "auto" keys the trainer filled, for messages ("train_batch_size from --batch")
};

enum class OffloadDevice { kNone, kCpu, kNvme };

// offload_optimizer and offload_param share one shape; fields only one of them has are marked.
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;  // none | cpu (nvme is known but not implemented)
  bool pin_memory = false;                      // page-locked host buffers
  int64_t buffer_count = 0;                     // DeepSpeed: 5 for offload_param, 4 for offload_optimizer
  int64_t buffer_size = 100000000;              // offload_param only: elements per buffer (1e8)
  int64_t max_in_cpu = 1000000000;              // offload_param only: elements kept in CPU memory (1e9)
  std::string nvme_path;                        // stored for completeness; nvme is not implemented
  double ratio = 1.0;                           // offload_optimizer only: fraction offloaded (only 1.0)
};

// DeepSpeed's offload defaults differ only in buffer_count.
inline OffloadConfig offload_defaults(int64_t buffer_count) {
  OffloadConfig config;
  config.buffer_count = buffer_count;
  return config;
}

struct ZeroOptimizationConfig {
  int stage = 0;                                          // 0 or 3 (1 and 2 are not implemented)
  bool contiguous_gradients = true;                       // copy gradients into a contiguous buffer
  bool reduce_scatter = true;                             // reduce gradients with reduce-scatter
  int64_t reduce_bucket_size = 500000000;                 // elements reduced at a time (5e8)
  bool allgather_partitions = true;                       // all-gather rather than broadcast partitions
  int64_t allgather_bucket_size = 500000000;              // elements all-gathered at a time (5e8)
  bool overlap_comm = false;                              // DeepSpeed default: true at stage 3, else false
  int64_t sub_group_size = 1000000000;                    // elements per optimizer-step group (1e9)
  int64_t prefetch_bucket_size = 50000000;                // stage3_prefetch_bucket_size (5e7)
  int64_t param_persistence_threshold = 100000;           // stage3_param_persistence_threshold (1e5)
  int64_t model_persistence_threshold = INT64_MAX;        // stage3_model_persistence_threshold (sys.maxsize)
  int64_t max_live_parameters = 1000000000;               // stage3_max_live_parameters (1e9)
  int64_t max_reuse_distance = 1000000000;                // stage3_max_reuse_distance (1e9)
  bool gather_16bit_weights_on_model_save = false;        // stage3_gather_16bit_weights_on_model_save
  bool ignore_unused_parameters = true;                   // tolerate parameters without gradients
  OffloadConfig offload_optimizer = offload_defaults(4);  // optimizer state placement
  OffloadConfig offload_param = offload_defaults(5);      // parameter placement (stage 3 only)
};

struct Fp16Config {
  bool enabled = false;                 // fp16 mixed precision
  double loss_scale = 0.0;              // 0 = dynamic loss scaling, else a static scale
  int64_t initial_scale_power = 16;     // dynamic scaling starts at 2^initial_scale_power
  int64_t loss_scale_window = 1000;     // steps without overflow before the scale doubles
  int64_t hysteresis = 2;               // overflows tolerated before the scale halves
  bool consecutive_hysteresis = false;  // refill hysteresis on each non-overflow step
  double min_loss_scale = 1.0;          // floor of the dynamic scale
};

struct Bf16Config {
  bool enabled = false;  // bf16 mixed precision (no loss scaling)
};

// "communication_data_type": the dtype gradients are reduce-scattered in. kModel (key absent or null) is DeepSpeed's
// default: fp16 under fp16.enabled, bf16 under bf16.enabled, else fp32.
enum class CommDataType { kModel, kFp16, kBf16, kFp32 };

// How gradients are scaled around the reduce-scatter (DeepSpeed's "prescale_gradients" and
// "gradient_predivide_factor"). ZeRO-3 divides every rank's gradient by world_size before the sum (DeepSpeed's
// reduce_scatter_coalesced); without prescale_gradients it also divides by gradient_predivide_factor and multiplies
// the result back by it, so that a 16-bit sum does not overflow.
struct GradScalingConfig {
  CommDataType comm_dtype = CommDataType::kModel;  // communication_data_type
  bool prescale_gradients = false;                 // divide by world_size only (the predivide factor must stay 1)
  double gradient_predivide_factor = 1.0;          // > 0; extra pre-division, undone after the sum
};

enum class OptimizerType { kNone, kAdam, kAdamW };

struct OptimizerConfig {
  OptimizerType type = OptimizerType::kNone;  // kNone: no "optimizer" block (the caller brings one)
  double lr = 1e-3;                           // learning rate (torch / DeepSpeed Adam default)
  double beta1 = 0.9;                         // betas[0]
  double beta2 = 0.999;                       // betas[1]
  double eps = 1e-8;                          // denominator epsilon
  double weight_decay = 0.0;                  // decoupled when adam_w_mode, else L2 added to the gradient
  bool adam_w_mode = true;                    // effective mode: type AdamW forces true (as DeepSpeed does)
  bool bias_correction = true;                // Adam bias correction (false is not implemented)
  bool torch_adam = false;                    // accepted: zerowire's Adam computes torch.optim.Adam's update
};

enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };

struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;  // kNone: constant learning rate
  double warmup_min_lr = 0.0;                 // WarmupLR / WarmupDecayLR: lr at step 0
  double warmup_max_lr = -1;                  // lr after warmup; < 0 = unset: WarmupLR takes the optimizer's
                                              // lr, WarmupDecayLR 0.001 (DeepSpeed 0.19's defaults)
  int64_t warmup_num_steps = 1000;            // steps of warmup (>= 1; DeepSpeed computes with max(2, n))
  WarmupType warmup_type = WarmupType::kLog;  // "log" or "linear" warmup curve
  int64_t total_num_steps = 0;                // WarmupDecayLR / WarmupCosineLR: required, no default
  int64_t last_batch_iteration = -1;          // resume point (-1: fresh start)
  double warmup_min_ratio = 0.0;              // WarmupCosineLR: lr ratio at step 0
  double cos_min_ratio = 1e-4;                // WarmupCosineLR: lr ratio at the end of the decay
};

// The value a trainer gives an "auto" key (the Hugging Face integration's role) and where it came from.
struct AutoSource {
  std::string json;    // the value as JSON text: "0.0003", "[0.9, 0.95]", "true"
  std::string source;  // where it came from, for the summary: "--lr", "--batch"
};
// JSON path -> the trainer's value. The batch keys take "train_batch_size" (the trainer's global batch) and
// "gradient_accumulation_steps"; the micro batch is computed from them and the world size.
using AutoFill = std::map<std::string, AutoSource>;

// What an "auto" became.
struct AutoResolution {
  std::string path;    // "optimizer.params.lr"
  std::string value;   // "0.0003"
  std::string source;  // "--lr", "DeepSpeed's default", "inferred from the other batch sizes"
};

// A key accepted although zerowire does something else with it (one INFO line each).
struct ConfigNote {
  std::string path;     // "zero_optimization.allgather_bucket_size"
  std::string message;  // the whole line: what the key asks and what zerowire does instead
};

struct ZeroConfig {
  BatchConfig batch;                           // batch sizes after DeepSpeed's inference rule
  ZeroOptimizationConfig zero;                 // "zero_optimization"
  Fp16Config fp16;                             // "fp16"
  Bf16Config bf16;                             // "bf16" (alias "bfloat16")
  double gradient_clipping = 0.0;              // global-norm clip, 0 = off
  GradScalingConfig grad_comm;                 // communication_data_type, prescale_gradients, gradient_predivide_factor
  OptimizerConfig optimizer;                   // "optimizer"
  SchedulerConfig scheduler;                   // "scheduler"
  int64_t steps_per_print = 10;                // logging interval in optimizer steps
  bool zero_allow_untested_optimizer = false;  // accepted; zerowire runs only its own (tested) Adam/AdamW
  bool zero_force_ds_cpu_optimizer = true;     // accepted; offloaded state always uses zerowire's CPU Adam
  std::set<std::string> explicit_keys;         // JSON paths set by the file; describe() marks the rest as defaults
  std::vector<AutoResolution> autos;           // every "auto" of the file and what it became, in file order
  std::vector<ConfigNote> notes;               // keys accepted with a difference, in file order
};

// Parses DeepSpeed JSON. `world_size` (> 0) is the data-parallel size and `world_size_source` says where it
// came from; both appear in batch-size errors. `fill` (may be null) gives the trainer's values for "auto".
// Errors are kInvalidArgument (bad value, unknown key, malformed JSON with the parser's line and column) or
// kUnsupported (a known DeepSpeed option zerowire lacks); a file with several problems gets one error listing
// all of them in file order, one per line, each with its JSON path, why, and what to write instead (the code is
// kUnsupported only when every problem is).
Result<ZeroConfig> parse_zero_config(std::string_view json_text, int world_size, std::string_view world_size_source,
                                     const AutoFill* fill = nullptr);

// Reads the file at `path` and parses it; every error names the path.
Result<ZeroConfig> load_zero_config(const std::string& path, int world_size, std::string_view world_size_source,
                                    const AutoFill* fill = nullptr);

// The effective settings, one "key = value" line each, defaults marked "(default)", batch numbers computed
// from the others marked "(inferred)" and "auto" values marked with what filled them.
std::string describe(const ZeroConfig& config);

// DeepSpeed's learning rate (deepspeed/runtime/lr_schedules.py) of `scheduler` at 0-based optimizer step `step`
// (the rate the step-th update uses: the scheduler has been stepped `step` times since construction), for an
// optimizer whose configured lr is `optimizer_lr` (WarmupCosineLR scales it; the others ignore it).
// kNone gives optimizer_lr.
double scheduler_lr(const SchedulerConfig& scheduler, double optimizer_lr, int64_t step);

}  // namespace zw::zero
