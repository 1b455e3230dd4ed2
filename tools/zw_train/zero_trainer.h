// zw_train/zero_trainer.h — the reference GPT trainer under ZeRO-3 (zw_train --deepspeed_config cfg.json).
//
// Every rank loads the same data and draws the same global batch (train_batch_size sequences) from the same
// seeded sampler as the single-process trainer; micro step k of rank r takes rows [(k·N + r)·mb, +mb) of it
// (mb = train_micro_batch_size_per_gpu). Parameters, gradients and Adam state are sharded by src/zero's engine;
// the loss of a step is the mean over all micro steps of all ranks (one all-reduce), so the curve is the one the
// single-process trainer prints for --batch train_batch_size (fp32: equal up to summation order).
// Optimizer: the DeepSpeed "optimizer" block when present (constant lr; a "scheduler" block is not implemented
// here and is refused); otherwise the trainer's own AdamW (betas 0.9/0.95, eps 1e-8, --weight-decay) with its
// warmup + cosine schedule (--lr, --min-lr, --warmup-steps). Clipping: "gradient_clipping" when the file sets it,
// else --grad-clip. Rank 0 prints progress and writes out_dir/metrics.jsonl; the others stay quiet.
// Checkpoints (--ckpt-every, and at the end of every run) are sharded (zero/checkpoint.h): every rank writes its
// master/m/v shards into out_dir/ckpt_zero/global_step<N>/ and rank 0 points out_dir/ckpt_zero/latest at it, with
// the sampler state as client state; --resume continues from latest on any number of ranks (the reader reshards),
// and with the same ranks repeats an uninterrupted run exactly. zw_consolidate turns one into a safetensors file.
// --sample --ckpt out_dir/ckpt_zero samples from the latest one (zero_sample.h). Non-goals (for now): the
// checkpoint fault-injection hook.
#pragma once

#include <string>

#include "zero/config.h"
#include "zerowire/communicator.h"
#include "zw_train/trainer.h"

namespace zw::train {

// Trains on `comm` with an already parsed DeepSpeed config (parsed for comm.size() ranks). Collective; on an error
// the communicator is aborted so that the other ranks fail at once.
Result<TrainReport> run_zero_training(const TrainConfig& config, const zero::ZeroConfig& ds, Communicator& comm);

// zwrun entry point: communicator from the environment, config from `ds_config_path`.
Result<TrainReport> run_zero_training_from_env(const TrainConfig& config, const std::string& ds_config_path);

}  // namespace zw::train
