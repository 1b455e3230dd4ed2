// zero/engine/engine_checkpoint.cc — the engine's shards to and from the sharded checkpoint format
// (zero/checkpoint/checkpoint.h).
//
// The engine's ModelLayout is the partition manager's, so a checkpoint saved on N ranks loads on M (the reader
// reshards). Saved: fp32 master weights, Adam m and v, the optimizer step and the loss scaler state; not saved:
// the gradient accumulator (checkpoints are taken between optimizer steps, when it is zero) and the 16-bit copy
// (rebuilt from the master weights). The device engine's GPU optimizer keeps master, m and v in device memory: they
// are copied down to save and up after loading (engine_device.cc), so the files are the same either way and a GPU
// run resumes on the CPU and vice versa. Non-goals: asynchronous saves.
#include "zero/checkpoint/checkpoint.h"
#include "zero/engine/engine.h"

namespace zw::zero {

Status Engine::save_checkpoint(const std::string& dir, const std::string& client_state) {
  if (in_micro_ || in_eval_ || micro_ != 0)
    return Status(Code::kInvalidArgument, "zero engine: save_checkpoint inside a step (" + std::to_string(micro_) +
                                              " micro steps taken); save right after step()");
  std::vector<float> dm, dmo, dv;  // device state, copied down
  const float* master = master_.as<float>();
  const float* m = m_.as<float>();
  const float* v = v_.as<float>();
  if (gpu_optimizer()) {
    ZW_TRY(device_state_to_host(&dm, &dmo, &dv));
    master = dm.data(), m = dmo.data(), v = dv.data();
  }
  std::vector<ShardConstRef> shards;
  for (int u = 0; u < pm_.num_units(); ++u) {
    const int64_t o = pm_.shard_offset(u);
    shards.push_back(ShardConstRef{master + o, m + o, v + o});
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
  std::vector<float> dm, dmo, dv;  // device state, loaded here and copied up
  float* master = master_.as<float>();
  float* m = m_.as<float>();
  float* v = v_.as<float>();
  if (gpu_optimizer()) {
    for (std::vector<float>* h : {&dm, &dmo, &dv}) h->assign(size_t(pm_.total_shard_numel()), 0.0f);
    master = dm.data(), m = dmo.data(), v = dv.data();
  }
  std::vector<ShardRef> shards;
  for (int u = 0; u < pm_.num_units(); ++u) {
    const int64_t o = pm_.shard_offset(u);
    shards.push_back(ShardRef{master + o, m + o, v + o});
  }
  ZW_ASSIGN_OR_RETURN(const LoadedCheckpoint loaded, zero::load_checkpoint(comm_, dir, pm_.layout(), shards));
  if (gpu_optimizer()) ZW_TRY(device_state_from_host(master, m, v));
  steps_ = loaded.scalars.step;
  if (!loaded.scalars.loss_scaler.empty()) ZW_TRY(scaler_.restore_json(loaded.scalars.loss_scaler));
  ZW_TRY(refresh_model16());
  return loaded.scalars.client_state;
}

}  // namespace zw::zero
