// tensor/gpt_layout.cc — GPT-2 parameter layout in units and its deterministic initialization.
//
// Non-goals: loading checkpoints (tests load golden weights through the layout's names).
#include "tensor/gpt_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace zw::tensor {
namespace {

// SplitMix64: tiny, platform-independent, good enough to draw init values.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1].
  double uniform() { return (double(next() >> 11) + 1.0) * 0x1p-53; }
  // Standard normal by Box-Muller (one value per call; the sine half is dropped for simplicity).
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform()); }

 private:
  uint64_t state_;
};

void add_slot(Unit& unit, std::string name, Shape shape, bool decay) {
  ParamSlot slot{std::move(name), unit.numel, shape, decay};
  unit.numel += static_cast<size_t>(shape.numel());
  unit.slots.push_back(std::move(slot));
}

Unit block_unit(int layer, int64_t C) {
  Unit u;
  char name[16];  // snprintf, not "h" + std::to_string(): GCC 12 raises a false -Wrestrict on that form
  std::snprintf(name, sizeof(name), "h%d", layer);
  u.name = name;
  const std::string p = u.name + ".";
  add_slot(u, p + "ln1.w", Shape{C}, false);
  add_slot(u, p + "ln1.b", Shape{C}, false);
  add_slot(u, p + "attn.qkv.w", Shape{3 * C, C}, true);
  add_slot(u, p + "attn.qkv.b", Shape{3 * C}, false);
  add_slot(u, p + "attn.proj.w", Shape{C, C}, true);
  add_slot(u, p + "attn.proj.b", Shape{C}, false);
  add_slot(u, p + "ln2.w", Shape{C}, false);
  add_slot(u, p + "ln2.b", Shape{C}, false);
  add_slot(u, p + "mlp.fc.w", Shape{4 * C, C}, true);
  add_slot(u, p + "mlp.fc.b", Shape{4 * C}, false);
  add_slot(u, p + "mlp.proj.w", Shape{C, 4 * C}, true);
  add_slot(u, p + "mlp.proj.b", Shape{C}, false);
  return u;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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

const ParamSlot* GptLayout::find(const std::string& name, const Unit** unit) const {
  for (const Unit& u : units)
    for (const ParamSlot& s : u.slots)
      if (s.name == name) {
        if (unit != nullptr) *unit = &u;
        return &s;
      }
  return nullptr;
}

Result<GptLayout> make_gpt_layout(const GptConfig& config, size_t unit_align) {
  ZW_TRY(validate(config));
  if (unit_align == 0) return Status(Code::kInvalidArgument, "gpt layout: unit_align must be >= 1");
  GptLayout layout;
  layout.config = config;
  layout.unit_align = unit_align;
  const int64_t C = config.d_model;
  Unit emb;
  emb.name = "embeddings";
  add_slot(emb, "wte", Shape{config.vocab_size, C}, true);
  add_slot(emb, "wpe", Shape{config.max_seq_len, C}, true);
  layout.units.push_back(std::move(emb));
  for (int l = 0; l < config.num_layers; ++l) layout.units.push_back(block_unit(l, C));
  Unit lnf;
  lnf.name = "lnf";
  add_slot(lnf, "lnf.w", Shape{C}, false);
  add_slot(lnf, "lnf.b", Shape{C}, false);
  layout.units.push_back(std::move(lnf));
  for (Unit& u : layout.units) {
    u.offset = layout.total_numel;
    u.padded_numel = (u.numel + unit_align - 1) / unit_align * unit_align;
    layout.total_numel += u.padded_numel;
    layout.num_params += u.numel;
  }
  return layout;
}

Status init_gpt_params(const GptLayout& layout, uint64_t seed, const Tensor& flat) {
  if (flat.dtype != DataType::kFloat32 || !flat.on_host() || flat.numel() != int64_t(layout.total_numel))
    return Status(Code::kInvalidArgument, "gpt init: expected a host f32 buffer of " +
                                              std::to_string(layout.total_numel) + " elements, got " + flat.describe());
  const double residual_std = 0.02 / std::sqrt(2.0 * layout.config.num_layers);
  float* base = flat.data<float>();
  for (size_t ui = 0; ui < layout.units.size(); ++ui) {
    const Unit& u = layout.units[ui];
    Rng rng(seed * 0x100000001b3ull + ui);
    std::fill(base + u.offset, base + u.offset + u.padded_numel, 0.0f);
    for (const ParamSlot& s : u.slots) {
      float* p = base + u.offset + s.offset;
      const bool is_norm = s.name.find(".ln") != std::string::npos || s.name.rfind("lnf.", 0) == 0;
      if (is_norm) {
        if (ends_with(s.name, ".w")) std::fill(p, p + s.numel(), 1.0f);
        continue;
      }
      if (!s.weight_decay) continue;  // biases stay zero
      const bool residual = ends_with(s.name, "attn.proj.w") || ends_with(s.name, "mlp.proj.w");
      const double std = residual ? residual_std : 0.02;
      for (int64_t i = 0; i < s.numel(); ++i) p[i] = static_cast<float>(std * rng.normal());
    }
  }
  return Status();
}

}  // namespace zw::tensor
