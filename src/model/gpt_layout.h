// tensor/gpt_layout.h — GPT-2 configuration, the parameter layout in ZeRO units, and deterministic init.
//
// Layout: every parameter lives in exactly one unit, and a unit is one contiguous range of a flat buffer:
//   unit 0          "embeddings": wte [V,C], wpe [maxT,C]
//   unit 1 + l      "h<l>" (block l): ln1.w, ln1.b, attn.qkv.w [3C,C], attn.qkv.b, attn.proj.w [C,C], attn.proj.b,
//                   ln2.w, ln2.b, mlp.fc.w [4C,C], mlp.fc.b, mlp.proj.w [C,4C], mlp.proj.b   (this order)
//   unit 1 + L      "lnf": lnf.w, lnf.b
// Weights are [out, in] (PyTorch nn.Linear). Each unit's numel is padded to a multiple of `unit_align` elements
// (the ZeRO engine passes world_size × alignment); units are concatenated in the order above, so the reference
// trainer can use one flat buffer and ZeRO can shard unit by unit — the same offsets serve parameters, gradients
// and optimizer state. The wte is tied: it is also the LM head.
// Non-goals: other architectures, vocabulary padding, sequence parallel layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor {

struct GptConfig {
  int num_layers = 12;     // transformer blocks
  int d_model = 768;       // channels C
  int num_heads = 12;      // attention heads (d_model % num_heads == 0)
  int max_seq_len = 1024;  // rows of wpe; a step may use any T <= this
  int vocab_size = 50257;  // V
};
Status validate(const GptConfig& config);

struct ParamSlot {
  std::string name;           // e.g. "h0.attn.qkv.w"
  size_t offset = 0;          // elements from the start of its unit
  Shape shape;                // extents
  bool weight_decay = false;  // GPT-2 rule: matmul weights and embeddings decay; biases and layernorms do not
  int64_t numel() const { return shape.numel(); }
};

struct Unit {
  std::string name;              // "embeddings", "h<l>", "lnf"
  size_t offset = 0;             // elements from the start of the flat buffer (multiple of unit_align)
  size_t numel = 0;              // parameters in the unit
  size_t padded_numel = 0;       // numel rounded up to unit_align
  std::vector<ParamSlot> slots;  // in layout order
};

struct GptLayout {
  GptConfig config;         // what the layout was made for
  size_t unit_align = 1;    // elements
  std::vector<Unit> units;  // embeddings, blocks, lnf
  size_t total_numel = 0;   // sum of padded_numel: size of the flat buffer
  size_t num_params = 0;    // sum of numel (no padding)

  static constexpr int kBlockSlots = 12;
  int block_unit(int layer) const { return 1 + layer; }
  int lnf_unit() const { return 1 + config.num_layers; }
  // Finds a slot by name; nullptr when absent.
  const ParamSlot* find(const std::string& name, const Unit** unit = nullptr) const;
};

// Indices of the parameters inside a block unit (slot order).
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

Result<GptLayout> make_gpt_layout(const GptConfig& config, size_t unit_align = 16);

// GPT-2 init into a flat f32 buffer of layout.total_numel elements: weights and embeddings N(0, 0.02), the two
// residual projections (attn.proj.w, mlp.proj.w) N(0, 0.02/sqrt(2·L)), biases 0, layernorm weights 1 and biases 0,
// padding 0. Deterministic for a seed on every platform (own generator and Box-Muller, no <random> distributions);
// each unit draws from its own stream, so units can be initialized independently (e.g. by their owning rank).
Status init_gpt_params(const GptLayout& layout, uint64_t seed, const Tensor& flat);

}  // namespace zw::tensor
