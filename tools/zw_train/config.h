// zw_train/config.h — the trainer's configuration, its JSON form (kept in checkpoints) and data selection.
//
// Non-goals: config files (the flags are the interface), distributed settings.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensor/gpt_layout.h"
#include "zerowire/status.h"

namespace zw::train {

struct TrainConfig {
  tensor::GptConfig model{4, 128, 4, 128, 256};  // layers, d_model, heads, seq_len (= max_seq_len), vocab
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
};

// Checks ranges and combinations; the message names the flag to change.
Status validate(const TrainConfig& config);

nlohmann::json model_to_json(const tensor::GptConfig& c);
Result<tensor::GptConfig> model_from_json(const nlohmann::json& j);
nlohmann::json train_to_json(const TrainConfig& c);

// Loads the configured tokens: --data-bin, else --data, else the embedded corpus. `what` describes the source.
Result<std::vector<int32_t>> load_tokens(const TrainConfig& config, std::string* what);

// Sets OpenBLAS's thread count (an explicit count keeps gemm results reproducible run to run).
void set_blas_threads(int threads);

}  // namespace zw::train
