// zw_train/trainer.h — the reference GPT trainer: one training loop for one process (CPU or CUDA) and for ZeRO-3
// across the ranks of zwrun.
//
// One step: draw the global batch from the seeded sampler; run the micro steps of this rank (rows
// [(k·N + r)·mb, +mb) of the batch for micro step k of rank r) forward and backward through model::GptModel, with
// the strategy's parameters (strategy.h); then the strategy's optimizer step: AdamW (betas 0.9/0.95, eps 1e-8 as in
// GPT-2/nanoGPT; decay on the layout's decaying parameters) with the warmup + cosine learning rate, after
// global-norm clipping (--grad-clip) and, for fp16, dynamic loss scaling (an overflow skips the step); then log
// (tokens/s, and MFU on a GPU), evaluate and checkpoint as configured.
// One process (run_training): parameters, gradients and AdamW state in flat buffers on the model's device (f32
// master weights and moments; the model computes on a bf16/fp16 copy on CUDA); checkpoints are one file of f32
// values that load on either device. ZeRO-3 (run_zero_training): the DeepSpeed JSON gives the batch sizes, the
// engine shards everything (host memory for now); the loss of a step is the mean over all micro steps of all ranks.
// Deterministic: the same config and data give the same losses bit for bit on a given device (seeded init and
// sampling, fixed OpenBLAS thread count, deterministic CUDA kernels), and a run resumed from a checkpoint continues
// with exactly the losses of an uninterrupted run.
// Threading: call from one thread. Non-goals: tensor or pipeline parallelism, other models.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "zero/config/config.h"
#include "zerowire/communicator.h"
#include "zerowire/status.h"
#include "zw_train/config.h"

namespace zw::train {

struct TrainReport {
  int64_t first_step = 0;                              // steps already taken when this run started (resume)
  std::vector<float> losses;                           // training loss of each step this run took
  std::vector<std::pair<int64_t, double>> val_losses;  // (step, validation loss)
  double tokens_per_s = 0;                             // median over this run's steps (all ranks together)
  double mfu = 0;                                      // median MFU in percent (0 on the CPU)
  std::string device;                                  // "cuda bf16", "cpu fp32", ...
  size_t peak_device_bytes = 0;                        // peak device memory held through the tensor layer
  bool reporter = true;                                // prints the summary (rank 0 of a ZeRO run)
};

// Trains in one process as configured: loads data, initializes or resumes, runs to config.steps (or
// config.stop_after more steps), writes out_dir/metrics.jsonl and out_dir/ckpt. Prints progress unless quiet.
Result<TrainReport> run_training(const TrainConfig& config);

// Trains under ZeRO-3 on `comm` with an already parsed DeepSpeed config (parsed for comm.size() ranks). Collective;
// on an error the communicator is aborted so that the other ranks fail at once. Checkpoints go to
// out_dir/ckpt_zero (sharded; resumable on any number of ranks).
Result<TrainReport> run_zero_training(const TrainConfig& config, const zero::ZeroConfig& ds, Communicator& comm);

// zwrun entry point: communicator from the environment, config from `ds_config_path`.
Result<TrainReport> run_zero_training_from_env(const TrainConfig& config, const std::string& ds_config_path);

}  // namespace zw::train
