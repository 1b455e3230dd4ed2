// zw_train/sample.h — text generation from any zw_train checkpoint, on the CPU or a GPU.
//
// The checkpoint is the single-process file (out_dir/ckpt) or a ZeRO-3 run's sharded checkpoint (out_dir/ckpt_zero:
// model.json plus the one `latest` names, consolidated into a temporary safetensors file one unit at a time and
// copied by parameter name into the flat layout). Each new token runs a full forward (model::Pass::kLogits) over
// the context truncated to the last seq_len tokens (batch 1, positions after the context padded and ignored thanks
// to the causal mask), then picks from the logits at the last context position: argmax when temperature is 0,
// else a draw from softmax(logits / temperature) with a seeded generator. Tokens below 256 are bytes; larger ids (an
// llm.c vocabulary) print as "<id>".
// Non-goals: KV caching, top-k/top-p, BPE decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt_layout.h"
#include "zerowire/status.h"

namespace zw::train {

inline constexpr const char* kZeroModelFile = "model.json";

struct SampleConfig {
  std::string ckpt_dir;        // out_dir/ckpt or out_dir/ckpt_zero
  std::string prompt;          // start of the text ("" starts from a newline)
  int tokens = 200;            // tokens to generate
  double temperature = 0.8;    // 0: greedy
  uint64_t seed = 1;           // sampling generator
  int threads = 1;             // OpenBLAS threads
  std::string device = "auto";  // cuda, cpu or auto (as zw_train --device)
};

// A checkpoint's model config and f32 parameters in the flat layout of model::make_gpt_layout(model).
struct FlatCheckpoint {
  model::GptConfig model;
  std::vector<float> params;
};
// Reads either kind of checkpoint (see the header comment).
Result<FlatCheckpoint> load_flat_params(const std::string& ckpt_dir);

// Generates config.tokens tokens, handing each one's text to `emit` as soon as it is chosen.
Status sample(const SampleConfig& config, const std::function<void(const std::string&)>& emit);

}  // namespace zw::train
