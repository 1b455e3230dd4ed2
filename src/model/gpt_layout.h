// model/gpt_layout.h — GPT-2 configuration, its parameter layout in units, and deterministic initialization.
//
// Layout (a tensor::ModelLayout): every parameter lives in exactly one unit, a unit is one contiguous range of a
// flat buffer:
//   unit 0          "embeddings": wte [V,C], wpe [maxT,C]
//   unit 1 + l      "h<l>" (block l): ln1.w, ln1.b, attn.qkv.w [3C,C], attn.qkv.b, attn.proj.w [C,C], attn.proj.b,
//                   ln2.w, ln2.b, mlp.fc.w [4C,C], mlp.fc.b, mlp.proj.w [C,4C], mlp.proj.b   (this order)
//   unit 1 + L      "lnf": lnf.w, lnf.b
// Weights are [out, in] (PyTorch nn.Linear). Each unit is padded to a multiple of `unit_align` elements (ZeRO-3
// passes world_size × alignment); the wte is tied: it is also the LM head. Init is GPT-2's: weights and embeddings
// N(0, 0.02), the residual projections N(0, 0.02/sqrt(2·L)), biases 0, layernorm weights 1. It is counter-based:
// each value depends only on (seed, unit, element), so a rank can initialize its shard alone and get the same
// bits as a whole-model init, for any padding.
// Non-goals: other architectures, vocabulary padding, sequence-parallel layouts.
#pragma once

#include <cstdint>

#include "tensor/param_layout.h"
#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::model {

struct GptConfig {
  int num_layers = 12;     // transformer blocks
  int d_model = 768;       // channels C
  int num_heads = 12;      // attention heads (d_model % num_heads == 0)
  int max_seq_len = 1024;  // rows of wpe; a step may use any T <= this
  int vocab_size = 50257;  // V
};
Status validate(const GptConfig& config);

struct GptLayout : tensor::ModelLayout {
  GptConfig config;  // what the layout was made for

  static constexpr int kBlockSlots = 12;
  int block_unit(int layer) const { return 1 + layer; }
  int lnf_unit() const { return 1 + config.num_layers; }
};

// Indices of the parameters inside a block unit (layout order).
enum BlockSlot : int {
  kLn1W,
  kLn1B,
  kQkvW,
  kQkvB,
  kAttnProjW,
  kAttnProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kMlpProjW,
  kMlpProjB
};

Result<GptLayout> make_gpt_layout(const GptConfig& config, int64_t unit_align = 16);

// Writes elements [begin, begin + count) of unit `unit` (unit-relative, padding included, padding 0) into out.
Status init_gpt_slice(const GptLayout& layout, uint64_t seed, int unit, int64_t begin, int64_t count, float* out);
// The whole model into a flat host f32 tensor of layout.total_numel elements.
Status init_gpt_params(const GptLayout& layout, uint64_t seed, const tensor::Tensor& flat);

}  // namespace zw::model
