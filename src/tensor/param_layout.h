// tensor/param_layout.h — how a model's parameters lie in flat buffers: units of named, shaped parameters.
//
// The one description of a parameter layout, shared by the model (which views parameters in it), the ZeRO-3
// engine (which shards it unit by unit) and checkpoints (which record it). A unit — a transformer block, the
// embeddings — is one contiguous range of a flat buffer holding its parameters back to back, padded at the end
// to a multiple of `unit_align` elements; units are concatenated in order. The same offsets serve parameters,
// gradients and optimizer state. ZeRO-3 pads units to world_size × alignment, so that each rank owns an equal,
// contiguous shard of every unit (rank-major): make_layout with that alignment.
// Non-goals: tensor/pipeline-parallel layouts, per-parameter dtypes, non-contiguous parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor {

struct ParamLayout {
  std::string name;           // e.g. "h0.attn.qkv.w"
  Shape shape;                // extents (unpadded)
  int64_t offset = 0;         // elements from the start of its unit
  bool weight_decay = false;  // whether AdamW decays it (GPT-2: matmul weights and embeddings)
  int64_t numel() const { return shape.numel(); }
};

struct UnitLayout {
  std::string name;                 // "embeddings", "h<l>", "lnf", ...
  int64_t offset = 0;               // elements from the start of the flat buffer (a multiple of unit_align)
  int64_t numel = 0;                // parameters in the unit (unpadded)
  int64_t padded_numel = 0;         // numel rounded up to unit_align
  std::vector<ParamLayout> params;  // in layout order, back to back from element 0
};

struct ModelLayout {
  int64_t unit_align = 1;         // elements each unit is padded to a multiple of
  std::vector<UnitLayout> units;  // in order
  int64_t total_numel = 0;        // sum of padded_numel: the flat buffer's size
  int64_t num_params = 0;         // sum of numel (no padding)

  // Finds a parameter by name; nullptr when absent (and *unit is left alone).
  const ParamLayout* find(const std::string& name, const UnitLayout** unit = nullptr) const;
};

// Lays out `units` (name and params with name, shape and decay set; offsets are computed): parameters back to
// back, each unit padded to a multiple of `align` (>= 1), units concatenated. Fails on an empty or duplicate name
// or a shape with a negative extent.
Result<ModelLayout> make_layout(std::vector<UnitLayout> units, int64_t align);

// A run of elements of a flat buffer with one weight-decay rule (padding belongs to no segment).
struct DecaySegment {
  int64_t offset = 0;  // elements from the start of the flat buffer
  int64_t numel = 0;   // length
  bool decay = false;  // AdamW decays these elements
};
// Every parameter of the layout as a segment, in flat order.
std::vector<DecaySegment> decay_segments(const ModelLayout& layout);

}  // namespace zw::tensor
