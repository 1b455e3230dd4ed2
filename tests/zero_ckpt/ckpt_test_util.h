// Test model for the checkpoint tests: a small GPT-like layout for any world size and alignment, parameter values
// keyed by (tensor kind, parameter, index) so that every layout of the same model holds the same full tensors,
// and the shards a rank owns under a given layout (padding zero). Header-only; used by the gtest and the fixture
// program that feeds the Python consolidation check.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "zero/layout.h"

namespace zw::test {

struct ParamSpec {
  const char* name;            // parameter name
  std::vector<int64_t> shape;  // extents
};
struct UnitSpec {
  const char* name;               // unit name
  std::vector<ParamSpec> params;  // in layout order
};

// Sizes chosen so that parameters straddle shard boundaries at every world size, one unit is tiny and one empty.
inline std::vector<UnitSpec> test_model() {
  return {{"embeddings", {{"wte", {37, 8}}, {"wpe", {5, 8}}}},
          {"h0", {{"h0.attn.qkv.w", {8, 24}}, {"h0.attn.qkv.b", {24}}, {"h0.mlp.w", {8, 13}}, {"h0.ln.w", {8}}}},
          {"empty", {}},
          {"lnf", {{"lnf.w", {3}}, {"lnf.b", {1}}}}};
}

// Parameters packed back to back from `gap` (elements left unused before each parameter: offsets differ).
inline zero::ModelLayout make_layout(int world, int64_t alignment, int64_t gap = 0) {
  zero::ModelLayout layout;
  layout.world_size = world;
  for (const UnitSpec& us : test_model()) {
    zero::UnitLayout u;
    u.name = us.name;
    int64_t offset = 0;
    for (const ParamSpec& ps : us.params) {
      offset += gap;
      zero::ParamLayout p{ps.name, ps.shape, offset};
      offset += p.numel();
      u.params.push_back(p);
    }
    u.numel = offset;
    const int64_t m = world * alignment;
    u.padded_numel = (offset + m - 1) / m * m;
    layout.units.push_back(u);
  }
  return layout;
}

// A distinct finite float for (kind, parameter index in the model, element); never zero.
inline float param_value(int kind, int param_id, int64_t i) {
  uint64_t x = (static_cast<uint64_t>(kind) << 48) ^ (static_cast<uint64_t>(param_id) << 32) ^ static_cast<uint64_t>(i);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  const float f = static_cast<float>(x >> 40) * 0x1p-24f - 0.5f;  // [-0.5, 0.5)
  return f == 0.0f ? 0.25f : f * (1.0f + kind);                   // m, v in other ranges than the weights
}

// Full tensor `kind` (0 master, 1 exp_avg, 2 exp_avg_sq) of the parameter with model-wide index param_id.
inline std::vector<float> full_param(int kind, int param_id, int64_t numel) {
  std::vector<float> v(numel);
  for (int64_t i = 0; i < numel; ++i) v[i] = param_value(kind, param_id, i);
  return v;
}

// Shard `rank` of tensor `kind` of every unit under `layout`: shards[u] of shard_numel elements.
inline std::vector<std::vector<float>> make_shards(const zero::ModelLayout& layout, int rank, int kind) {
  std::vector<std::vector<float>> out;
  int param_id = 0;
  for (const zero::UnitLayout& u : layout.units) {
    const int64_t s = layout.shard_numel(u), lo = rank * s;
    std::vector<float> shard(s, 0.0f);
    for (const zero::ParamLayout& p : u.params) {
      for (int64_t j = 0; j < p.numel(); ++j) {
        const int64_t x = p.offset + j;
        if (x >= lo && x < lo + s) shard[x - lo] = param_value(kind, param_id, j);
      }
      ++param_id;
    }
    out.push_back(std::move(shard));
  }
  return out;
}

}  // namespace zw::test
