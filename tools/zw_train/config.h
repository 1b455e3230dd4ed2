// zw_train/config.h — the trainer's configuration, its JSON form (kept in checkpoints) and data selection.
//
// Non-goals: config files (the flags are the interface; the DeepSpeed JSON is parsed by src/zero), distributed
// settings.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "model/gpt_layout.h"
#include "zero/config/config.h"
#include "zerowire/status.h"

namespace zw::train {

struct TrainConfig {
  model::GptConfig model{4, 128, 4, 128, 256};   // layers, d_model, heads, seq_len (= max_seq_len), vocab
  int batch = 8;                                 // sequences per step
  int steps = 500;                               // total optimizer steps (also the cosine schedule's length)
  double lr = 1e-3;                              // peak learning rate
  double min_lr = 1e-4;                          // cosine floor
  int warmup_steps = 20;                         // linear warmup steps
  double weight_decay = 0.1;                     // AdamW decoupled decay (decaying slots only)
  double grad_clip = 1.0;                        // max global grad norm (<= 0: no clipping)
  uint64_t seed = 1337;                          // parameter init and batch sampling
  std::string data;                              // byte-level text file ("" = not used)
  std::string data_bin;                          // llm.c token shard ("" = not used)
  std::string out_dir = "zw_train_out";          // metrics.jsonl and ckpt/ go here
  int log_every = 1;                             // progress line every N steps
  int eval_every = 50;                           // validation every N steps (0: only at the end)
  int eval_batches = 4;                          // validation batches per evaluation
  int ckpt_every = 0;                            // checkpoint every N steps (0: only at the end)
  bool resume = false;                           // continue from out_dir/ckpt
  int stop_after = 0;                            // stop (with a checkpoint) after N steps of this run (0: no)
  int threads = 1;                               // OpenBLAS threads (fixed, for determinism)
  bool quiet = false;                            // no progress lines
  int64_t fault_ckpt_abort_bytes = -1;           // test hook: abort while writing the next checkpoint
  std::string timeline;                          // ZeRO-3: write PREFIX.rank<r>.json span timelines ("" = off)
  std::string device = "auto";                   // "cuda", "cpu", or "auto" (cuda where a GPU is visible)
  std::string dtype = "auto";                    // "bf16", "fp16", "fp32", or "auto" (bf16 on cuda, fp32 on cpu)
  double peak_tflops = 989.4;                    // MFU denominator: H100/H200 SXM dense bf16 (datasheet)
  bool profile = false;                          // CUDA: per-op device time, printed at the end of the run
  std::string recompute = "all";                 // what backward recomputes: all, gelu or none (model::Recompute)
  int grad_accum = 1;                            // fills "auto" gradient_accumulation_steps of a DeepSpeed config
  std::set<std::string> flags_given;             // flags set on the command line ("--lr"): who won against the file
  zero::SchedulerConfig ds_scheduler;            // a DeepSpeed "scheduler" block (ZeRO); kNone: warmup + cosine
};

// The device and compute dtype a config resolves to on this machine.
struct Placement {
  MemKind device = MemKind::kHost;      // where the model runs
  DataType dtype = DataType::kFloat32;  // compute dtype
  bool loss_scaling = false;            // fp16: dynamic loss scaling
  int cuda_device = 0;                  // CUDA: local rank modulo the visible GPUs (one process per GPU)
};
// "auto" picks cuda when a CUDA device is visible (and this build has CUDA); a cuda request without one, or a
// dtype the device cannot compute in, is kInvalidArgument naming the flag.
Result<Placement> resolve_placement(const TrainConfig& config);
const char* placement_name(const Placement& p);  // "cuda bf16", "cpu fp32", ...

// Training FLOPs per token of the model at sequence length T (6·N + 12·L·C·T, as PaLM and llm.c count them).
double flops_per_token(const model::GptConfig& c, int64_t num_params);

// Checks ranges and combinations; the message names the flag to change.
Status validate(const TrainConfig& config);

nlohmann::json model_to_json(const model::GptConfig& c);
Result<model::GptConfig> model_from_json(const nlohmann::json& j);
nlohmann::json train_to_json(const TrainConfig& c);

// Loads the configured tokens: --data-bin, else --data, else the embedded corpus. `what` describes the source.
Result<std::vector<int32_t>> load_tokens(const TrainConfig& config, std::string* what);

// Sets OpenBLAS's thread count (an explicit count keeps gemm results reproducible run to run).
void set_blas_threads(int threads);

}  // namespace zw::train
