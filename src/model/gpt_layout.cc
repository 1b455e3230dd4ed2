// model/gpt_layout.cc — GPT-2 parameter layout in units and its counter-based initialization.
//
// Non-goals: loading checkpoints (the trainer and the tests load weights through the layout's names).
#include "model/gpt_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace zw::model {
namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;  // SplitMix64's increment

// SplitMix64 from a given state: the k-th normal of a unit's stream starts at state0 + 2k·gamma (two draws each).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += kGamma);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double(next() >> 11) + 1.0) * 0x1p-53; }  // (0, 1]
  // Box-Muller, the cosine half only.
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform()); }
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

tensor::ParamLayout param(std::string name, tensor::Shape shape, bool decay) {
  return tensor::ParamLayout{std::move(name), shape, 0, decay};
}

tensor::UnitLayout block_unit(int layer, int64_t C) {
  tensor::UnitLayout u;
  char name[16];  // snprintf, not "h" + std::to_string(): GCC 12 raises a false -Wrestrict on that form
  std::snprintf(name, sizeof(name), "h%d", layer);
  u.name = name;
  const std::string p = u.name + ".";
  u.params = {param(p + "ln1.w", {C}, false),          param(p + "ln1.b", {C}, false),
              param(p + "attn.qkv.w", {3 * C, C}, true), param(p + "attn.qkv.b", {3 * C}, false),
              param(p + "attn.proj.w", {C, C}, true),    param(p + "attn.proj.b", {C}, false),
              param(p + "ln2.w", {C}, false),            param(p + "ln2.b", {C}, false),
              param(p + "mlp.fc.w", {4 * C, C}, true),   param(p + "mlp.fc.b", {4 * C}, false),
              param(p + "mlp.proj.w", {C, 4 * C}, true), param(p + "mlp.proj.b", {C}, false)};
  return u;
}

}  // namespace

Status validate(const GptConfig& c) {
  if (c.num_layers < 1 || c.d_model < 1 || c.num_heads < 1 || c.max_seq_len < 1 || c.vocab_size < 1)
    return Status(Code::kInvalidArgument, "gpt config: layers, d_model, heads, seq len and vocab must be >= 1");
  if (c.d_model % c.num_heads != 0)
    return Status(Code::kInvalidArgument, "gpt config: d_model " + std::to_string(c.d_model) +
                                              " is not divisible by num_heads " + std::to_string(c.num_heads));
  return Status();
}

Result<GptLayout> make_gpt_layout(const GptConfig& config, int64_t unit_align) {
  ZW_TRY(validate(config));
  const int64_t C = config.d_model;
  std::vector<tensor::UnitLayout> units;
  tensor::UnitLayout emb;
  emb.name = "embeddings";
  emb.params = {param("wte", {config.vocab_size, C}, true), param("wpe", {config.max_seq_len, C}, true)};
  units.push_back(std::move(emb));
  for (int l = 0; l < config.num_layers; ++l) units.push_back(block_unit(l, C));
  tensor::UnitLayout lnf;
  lnf.name = "lnf";
  lnf.params = {param("lnf.w", {C}, false), param("lnf.b", {C}, false)};
  units.push_back(std::move(lnf));
  ZW_ASSIGN_OR_RETURN(tensor::ModelLayout base, tensor::make_layout(std::move(units), unit_align));
  GptLayout layout;
  static_cast<tensor::ModelLayout&>(layout) = std::move(base);
  layout.config = config;
  return layout;
}

Status init_gpt_slice(const GptLayout& layout, uint64_t seed, int unit, int64_t begin, int64_t count, float* out) {
  if (unit < 0 || unit >= int(layout.units.size()) || begin < 0 || count < 0 ||
      begin + count > layout.units[unit].padded_numel)
    return Status(Code::kInvalidArgument, "gpt init: unit " + std::to_string(unit) + " elements [" +
                                              std::to_string(begin) + ", " + std::to_string(begin + count) +
                                              ") are outside the layout");
  const tensor::UnitLayout& u = layout.units[unit];
  const uint64_t state0 = seed * 0x100000001b3ull + uint64_t(unit);
  const double residual_std = 0.02 / std::sqrt(2.0 * layout.config.num_layers);
  std::fill(out, out + count, 0.0f);
  const int64_t end = begin + count;
  int64_t drawn = 0;  // random values of the unit before this parameter
  for (const tensor::ParamLayout& p : u.params) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel());
    const bool is_norm = p.name.find(".ln") != std::string::npos || p.name.rfind("lnf.", 0) == 0;
    if (is_norm) {
      if (ends_with(p.name, ".w") && lo < hi) std::fill(out + (lo - begin), out + (hi - begin), 1.0f);
      continue;
    }
    if (!p.weight_decay) continue;  // biases stay zero
    const bool residual = ends_with(p.name, "attn.proj.w") || ends_with(p.name, "mlp.proj.w");
    const double std = residual ? residual_std : 0.02;
    for (int64_t i = lo; i < hi; ++i) {
      SplitMix64 rng{state0 + uint64_t(2 * (drawn + i - p.offset)) * kGamma};
      out[i - begin] = static_cast<float>(std * rng.normal());
    }
    drawn += p.numel();
  }
  return Status();
}

Status init_gpt_params(const GptLayout& layout, uint64_t seed, const tensor::Tensor& flat) {
  if (flat.dtype != DataType::kFloat32 || !flat.on_host() || flat.numel() != layout.total_numel)
    return Status(Code::kInvalidArgument, "gpt init: expected a host f32 buffer of " +
                                              std::to_string(layout.total_numel) + " elements, got " + flat.describe());
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const tensor::UnitLayout& unit = layout.units[u];
    ZW_TRY(init_gpt_slice(layout, seed, int(u), 0, unit.padded_numel, flat.data<float>() + unit.offset));
  }
  return Status();
}

}  // namespace zw::model
