// zw_train/zero_init.h — the GPT initial values of one slice of one unit, bit-identical to what
// tensor::init_gpt_params writes there, computed without the rest of the model: each ZeRO-3 rank initialises only
// its own shard.
//
// init_gpt_params draws unit u's random values from SplitMix64 seeded with seed · 0x100000001b3 + u, two draws per
// value (Box-Muller, cosine half) in layout order over the decayed, non-norm slots. SplitMix64 is counter-based
// (state after k draws = state0 + k · 0x9e3779b97f4a7c15), so the j-th random value of a unit is computed directly
// from j. The slot rules (norm weights 1, biases 0, residual projections 0.02 / sqrt(2 · layers), others 0.02) are
// those of tensor/gpt_layout.cc; tests/zero_engine/zero_init_test.cc compares the two for every element.
// Non-goals: other models' initialisers.
#pragma once

#include <cstdint>

#include "tensor/gpt_layout.h"
#include "zerowire/status.h"

namespace zw::train {

// Writes elements [begin, begin + count) of unit `unit` (padding included: zero) into out[0, count).
Status init_gpt_slice(const tensor::GptLayout& layout, uint64_t seed, int unit, int64_t begin, int64_t count,
                      float* out);

}  // namespace zw::train
