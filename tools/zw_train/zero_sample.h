// zw_train/zero_sample.h — the parameters of a ZeRO-3 training run's sharded checkpoint, for --sample.
//
// A ZeRO run of zw_train writes out_dir/ckpt_zero/{latest, model.json, global_step<N>/...}. This reads model.json,
// consolidates the checkpoint named by latest into a temporary safetensors file (zero/checkpoint.h, one unit in
// memory at a time), and copies every parameter by name into the flat f32 buffer of the single-process layout.
// Non-goals: optimizer state, resuming the single-process trainer from a ZeRO checkpoint.
#pragma once

#include <string>
#include <vector>

#include "tensor/gpt_layout.h"
#include "zerowire/status.h"

namespace zw::train {

inline constexpr const char* kZeroModelFile = "model.json";

struct ZeroParams {
  tensor::GptConfig model;    // from model.json
  std::vector<float> params;  // make_gpt_layout(model).total_numel elements, in layout order
};

// True when `dir` looks like out_dir/ckpt_zero (has a "latest" file).
bool is_zero_checkpoint(const std::string& dir);
Result<ZeroParams> load_zero_params(const std::string& dir);

}  // namespace zw::train
