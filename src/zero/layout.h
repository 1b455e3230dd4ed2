// zero/layout.h — how a model's parameters are cut into ZeRO-3 units and shards; the contract between the
// partition manager (which fills it) and the checkpoint writer/reader (which records it and reshards from it).
//
// A unit is one flat buffer of `padded_numel` elements holding its parameters back to back at their `offset`s
// (elements), padded at the end to a multiple of world_size × alignment. The buffer is rank-major: rank r owns
// elements [r·S, (r+1)·S) with S = padded_numel / world_size. Parameters keep their unpadded shapes here; a
// parameter may straddle the boundary between two ranks' shards. The same offsets serve parameters, gradients
// and optimizer state (fp32 master weights, Adam's m and v).
// Non-goals: tensor/pipeline-parallel layouts, per-parameter dtypes (every stored tensor is fp32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zw::zero {

struct ParamLayout {
  std::string name;            // e.g. "h0.attn.qkv.w"
  std::vector<int64_t> shape;  // unpadded extents
  int64_t offset = 0;          // elements from the start of its unit's flat buffer
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return n;
  }
};

struct UnitLayout {
  std::string name;                 // "embeddings", "h<l>", "lnf", "persistent"
  int64_t numel = 0;                // parameters in the unit (unpadded)
  int64_t padded_numel = 0;         // numel rounded up to world_size × alignment
  std::vector<ParamLayout> params;  // in layout order, non-overlapping, all within [0, numel)
};

struct ModelLayout {
  int world_size = 1;             // ranks the units were padded and sharded for
  std::vector<UnitLayout> units;  // in the model's fetch order of the first step
  int64_t shard_numel(const UnitLayout& unit) const { return unit.padded_numel / world_size; }
};

}  // namespace zw::zero
