// zero/engine/engine_checkpoint.cc — the engine's shards to and from the sharded checkpoint format
// (zero/checkpoint/checkpoint.h).
//
// The engine's ModelLayout is the partition manager's, so a checkpoint saved on N ranks loads on M (the reader
// reshards). Saved: fp32 master weights, Adam m and v, the optimizer step and the loss scaler state; not saved:
// the gradient accumulator (checkpoints are taken between optimizer steps, when it is zero) and the 16-bit copy
// (rebuilt from the master weights). Non-goals: asynchronous saves.
#include "zero/checkpoint/checkpoint.h"
#include "zero/engine/engine.h"

namespace zw::zero {

Status Engine::save_checkpoint(const std::string& dir, const std::string& client_state) {
  if (in_micro_ || in_eval_ || micro_ != 0)
    return Status(Code::kInvalidArgument, "zero engine: save_checkpoint inside a step (" + std::to_string(micro_) +
                                              " micro steps taken); save right after step()");
  std::vector<ShardConstRef> shards;
  for (int u = 0; u < pm_.num_units(); ++u) {
    const int64_t o = pm_.shard_offset(u);
    shards.push_back(ShardConstRef{master_.as<float>() + o, m_.as<float>() + o, v_.as<float>() + o});
  }
  CheckpointScalars scalars;
  scalars.step = steps_;
  scalars.loss_scaler = scaler_.to_json();
  scalars.client_state = client_state;
  return zero::save_checkpoint(comm_, dir, pm_.layout(), shards, scalars);
}

Result<std::string> Engine::load_checkpoint(const std::string& dir) {
  if (in_micro_ || in_eval_ || micro_ != 0)
    return Status(Code::kInvalidArgument, "zero engine: load_checkpoint inside a step; load before training");
  std::vector<ShardRef> shards;
  for (int u = 0; u < pm_.num_units(); ++u) {
    const int64_t o = pm_.shard_offset(u);
    shards.push_back(ShardRef{master_.as<float>() + o, m_.as<float>() + o, v_.as<float>() + o});
  }
  ZW_ASSIGN_OR_RETURN(const LoadedCheckpoint loaded, zero::load_checkpoint(comm_, dir, pm_.layout(), shards));
  steps_ = loaded.scalars.step;
  if (!loaded.scalars.loss_scaler.empty()) ZW_TRY(scaler_.restore_json(loaded.scalars.loss_scaler));
  ZW_TRY(refresh_model16());
  return loaded.scalars.client_state;
}

}  // namespace zw::zero
