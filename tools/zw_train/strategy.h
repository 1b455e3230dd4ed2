// zw_train/strategy.h — how the trainer holds parameters, gradients and optimizer state: in one process (flat
// buffers and FlatAdamW on the model's device) or sharded by ZeRO-3 across the ranks of zwrun (src/zero's engine).
//
// The training loop (trainer.cc) is one for both: per step it draws the global batch, runs
// accumulation_steps() micro steps of micro_batch() sequences of this rank's rows through the model with
// params() as its parameter provider (begin_micro_step / forward / backward / end_micro_step), then step(lr).
// A strategy also owns checkpoints (its own format: one file, or sharded) and sums scalars over ranks.
// Threading: one thread. Non-goals: pipeline or tensor parallelism.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/gpt.h"
#include "tensor/cuda_context.h"
#include "zerowire/communicator.h"
#include "zerowire/status.h"
#include "zero/config/config.h"
#include "zw_train/config.h"

namespace zw::train {

struct StepOutcome {
  bool skipped = false;  // fp16 overflow: no update, the step counter did not advance
  double grad_norm = 0;  // global L2 norm of the averaged, unscaled gradient, before clipping
  double loss_scale = 1;  // the scale this step's backward passes used
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  virtual model::ParamProvider& params() = 0;
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  virtual int micro_batch() const = 0;          // sequences per micro step and rank
  virtual int accumulation_steps() const = 0;   // micro steps per optimizer step
  // Fills this rank's parameters with the GPT-2 init of `seed` (model::init_gpt_params / init_gpt_slice).
  virtual Status init_params(uint64_t seed) = 0;

  virtual Status begin_micro_step() = 0;
  virtual Status end_micro_step() = 0;
  // The optimizer step after accumulation_steps() micro steps with learning rate `lr`.
  virtual Result<StepOutcome> step(double lr) = 0;
  virtual Status begin_eval() { return Status(); }
  virtual Status end_eval() { return Status(); }
  // The learning rate to use at a step whose schedule gives `scheduled` (a DeepSpeed optimizer block may fix it).
  virtual double lr(double scheduled) const { return scheduled; }

  // Sum of `local` over all ranks (collective where there are several).
  virtual Result<double> sum_over_ranks(double local) { return local; }
  // Collective: saves parameters and optimizer state under out_dir with the trainer's `client` JSON.
  virtual Status save(const std::string& out_dir, int64_t step, const nlohmann::json& client) = 0;
  // Collective: loads the newest checkpoint under out_dir and returns its client JSON, or nullopt when there is
  // none. `check` sees the client JSON before any state is applied (a refusal is returned as is).
  virtual Result<std::optional<nlohmann::json>> load(const std::string& out_dir,
                                                     const std::function<Status(const nlohmann::json&)>& check) = 0;
  // A line for the start of the log (where the state lives and how big it is).
  virtual std::string describe() const = 0;
  // At the end of a run: timelines, communication statistics (rank 0 prints).
  virtual Status finish(bool quiet) { return Status(); }
};

// One process: parameters, f32 gradients and AdamW state in flat buffers on the model's device.
Result<std::unique_ptr<Strategy>> make_flat_strategy(const TrainConfig& config, const model::GptLayout& layout,
                                                     const Placement& placement, tensor::CudaContext* cuda);
// ZeRO-3 on `comm` with a parsed DeepSpeed config: host memory (placement on the CPU, cuda null), or the engine's
// device path on `cuda`'s device and stream (placement.dtype must be the config's fp16/bf16/fp32).
Result<std::unique_ptr<Strategy>> make_zero_strategy(const TrainConfig& config, const zero::ZeroConfig& ds,
                                                     Communicator& comm, const model::GptLayout& layout,
                                                     const Placement& placement, tensor::CudaContext* cuda);

}  // namespace zw::train
