// Test model for the checkpoint tests: a small GPT-like layout for any world size and alignment, parameter values
// keyed by (tensor kind, parameter, index) so that every layout of the same model holds the same full tensors,
// and the shards a rank owns under a given layout (padding zero). Layouts are tensor::ModelLayouts padded for a world
// size, which travels beside them as the checkpoint API wants. Header-only; used by the gtest and the fixture
// program that feeds the Python consolidation check.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tensor/param_layout.h"
#include "zero/checkpoint/checkpoint.h"

namespace zw::test {

struct TestParam {
  const char* name;            // parameter name
  std::vector<int64_t> shape;  // extents
};
struct TestUnit {
  const char* name;               // unit name
  std::vector<TestParam> params;  // in layout order
};

// Sizes chosen so that parameters straddle shard boundaries at every world size, one unit is tiny and one empty.
inline std::vector<TestUnit> test_model() {
  return {{"embeddings", {{"wte", {37, 8}}, {"wpe", {5, 8}}}},
          {"h0", {{"h0.attn.qkv.w", {8, 24}}, {"h0.attn.qkv.b", {24}}, {"h0.mlp.w", {8, 13}}, {"h0.ln.w", {8}}}},
          {"empty", {}},
          {"lnf", {{"lnf.w", {3}}, {"lnf.b", {1}}}}};
}

// A Shape of the given extents (at most tensor::kMaxDims).
inline tensor::Shape shape_of(const std::vector<int64_t>& dims) {
  tensor::Shape s;
  s.rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) s.dims[i] = dims[i];
  return s;
}

// Parameters packed back to back from `gap` (elements left unused before each parameter: offsets differ), units
// padded to a multiple of world × alignment (an empty unit to 0 elements).
inline tensor::ModelLayout make_layout(int world, int64_t alignment, int64_t gap = 0) {
  tensor::ModelLayout layout;
  layout.unit_align = world * alignment;
  for (const TestUnit& us : test_model()) {
    tensor::UnitLayout u;
    u.name = us.name;
    u.offset = layout.total_numel;
    int64_t offset = 0;
    for (const TestParam& ps : us.params) {
      offset += gap;
      tensor::ParamLayout p{ps.name, shape_of(ps.shape), offset};
      offset += p.numel();
      u.params.push_back(p);
    }
    u.numel = offset;
    const int64_t m = world * alignment;
    u.padded_numel = (offset + m - 1) / m * m;
    layout.total_numel += u.padded_numel;
    layout.num_params += u.numel;
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

// Shard `rank` of tensor `kind` of every unit under `layout` (padded for `world` ranks): shards[u] of shard_numel
// elements.
inline std::vector<std::vector<float>> make_shards(const tensor::ModelLayout& layout, int world, int rank, int kind) {
  std::vector<std::vector<float>> out;
  int param_id = 0;
  for (const tensor::UnitLayout& u : layout.units) {
    const int64_t s = zero::shard_numel(u, world), lo = rank * s;
    std::vector<float> shard(s, 0.0f);
    for (const tensor::ParamLayout& p : u.params) {
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
