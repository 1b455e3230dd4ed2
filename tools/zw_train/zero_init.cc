// zw_train/zero_init.cc — init_gpt_slice: counter-based replay of tensor::init_gpt_params for one slice.
//
// Non-goals: see zero_init.h.
#include "zw_train/zero_init.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace zw::train {
namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;  // SplitMix64's increment

// SplitMix64 from a given state, as tensor/gpt_layout.cc's Rng.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += kGamma);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double(next() >> 11) + 1.0) * 0x1p-53; }
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform()); }
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Status init_gpt_slice(const tensor::GptLayout& layout, uint64_t seed, int unit, int64_t begin, int64_t count,
                      float* out) {
  if (unit < 0 || unit >= int(layout.units.size()) || begin < 0 || count < 0 ||
      begin + count > int64_t(layout.units[unit].padded_numel))
    return Status(Code::kInvalidArgument, "gpt slice init: unit " + std::to_string(unit) + " elements [" +
                                              std::to_string(begin) + ", " + std::to_string(begin + count) +
                                              ") are outside the layout");
  const tensor::Unit& u = layout.units[unit];
  const uint64_t state0 = seed * 0x100000001b3ull + uint64_t(unit);
  const double residual_std = 0.02 / std::sqrt(2.0 * layout.config.num_layers);
  std::fill(out, out + count, 0.0f);
  const int64_t end = begin + count;
  int64_t drawn = 0;  // random values of the unit before this slot
  for (const tensor::ParamSlot& s : u.slots) {
    const int64_t lo = std::max<int64_t>(begin, int64_t(s.offset)), hi = std::min<int64_t>(end, s.offset + s.numel());
    const bool is_norm = s.name.find(".ln") != std::string::npos || s.name.rfind("lnf.", 0) == 0;
    if (is_norm) {
      if (ends_with(s.name, ".w") && lo < hi) std::fill(out + (lo - begin), out + (hi - begin), 1.0f);
      continue;
    }
    if (!s.weight_decay) continue;  // biases stay zero
    const bool residual = ends_with(s.name, "attn.proj.w") || ends_with(s.name, "mlp.proj.w");
    const double std = residual ? residual_std : 0.02;
    for (int64_t i = lo; i < hi; ++i) {
      SplitMix64 rng{state0 + uint64_t(2 * (drawn + i - int64_t(s.offset))) * kGamma};
      out[i - begin] = static_cast<float>(std * rng.normal());
    }
    drawn += s.numel();
  }
  return Status();
}

}  // namespace zw::train
