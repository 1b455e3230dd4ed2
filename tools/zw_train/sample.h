// zw_train/sample.h — text generation from a trainer checkpoint (byte tokenizer).
//
// Each new token runs a full forward over the context truncated to the last seq_len tokens (batch 1, positions
// after the context padded and ignored thanks to the causal mask), then picks from the logits at the last
// context position: argmax when temperature is 0, else a draw from softmax(logits / temperature) with a seeded
// generator. Tokens below 256 are bytes; larger ids (an llm.c vocabulary) print as "<id>".
// Non-goals: KV caching, top-k/top-p, BPE decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "zerowire/status.h"

namespace zw::train {

struct SampleConfig {
  std::string ckpt_dir;      // a trainer checkpoint directory (out_dir/ckpt)
  std::string prompt;        // start of the text ("" starts from a newline)
  int tokens = 200;          // tokens to generate
  double temperature = 0.8;  // 0: greedy
  uint64_t seed = 1;         // sampling generator
  int threads = 1;           // OpenBLAS threads
};

// Generates config.tokens tokens, handing each one's text to `emit` as soon as it is chosen.
Status sample(const SampleConfig& config, const std::function<void(const std::string&)>& emit);

}  // namespace zw::train
