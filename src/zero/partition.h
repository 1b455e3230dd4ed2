// zero/partition.h — the ZeRO-3 partition manager: cuts a model's parameters into units and shards.
//
// A unit (a transformer block, the embeddings, a group of small parameters) is one flat buffer holding its
// parameters back to back, padded at the end to a multiple of world_size × alignment elements. The buffer is
// rank-major: rank r owns the contiguous shard [r·S, (r+1)·S), S = padded_numel / world_size. This rank keeps
// only its shards, concatenated unit after unit into one "shard space" (the same offsets index the fp32 master
// weights, the reduced gradients and Adam's m and v). Parameters are views into a gathered unit buffer, so the
// unpadded shapes are kept as metadata only (zero::ModelLayout, shared with the sharded checkpoint).
// Threading: immutable after create(); any thread may read it.
// Non-goals: owning memory (the engine does), tensor/pipeline parallel layouts, per-parameter dtypes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/gpt_layout.h"
#include "zero/layout.h"
#include "zerowire/status.h"

namespace zw::zero {

// One parameter as the model declares it.
struct ParamSpec {
  std::string name;            // e.g. "h0.attn.qkv.w"
  std::vector<int64_t> shape;  // unpadded extents
  bool weight_decay = false;   // whether the optimizer applies weight decay to it
};

// One unit as the model declares it: parameters in layout order.
struct UnitSpec {
  std::string name;               // "embeddings", "h<l>", "lnf", ...
  std::vector<ParamSpec> params;  // back to back in the unit buffer
};

// The part of one parameter that falls inside this rank's shard of its unit.
struct ShardPiece {
  int unit = 0;               // unit index
  int param = 0;              // parameter index within the unit
  int64_t shard_offset = 0;   // element offset in this rank's shard space
  int64_t numel = 0;          // elements of the parameter inside the shard
  bool weight_decay = false;  // copied from the ParamSpec
};

class PartitionManager {
 public:
  PartitionManager() = default;
  // alignment (elements, >= 1): each unit is padded to a multiple of world_size × alignment.
  static Result<PartitionManager> create(std::vector<UnitSpec> units, int rank, int world_size, int64_t alignment);
  // The GPT layout's units and parameters (in gpt_layout.h order).
  static std::vector<UnitSpec> gpt_units(const tensor::GptLayout& layout);

  const ModelLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  int world_size() const { return layout_.world_size; }
  int64_t alignment() const { return alignment_; }  // elements; units are padded to world_size × alignment
  int num_units() const { return static_cast<int>(layout_.units.size()); }
  const UnitLayout& unit(int u) const { return layout_.units[u]; }
  bool weight_decay(int u, int p) const { return decay_[u][p]; }

  int64_t shard_numel(int u) const { return layout_.shard_numel(layout_.units[u]); }
  // Offset of unit u's shard in this rank's shard space.
  int64_t shard_offset(int u) const { return shard_offsets_[u]; }
  // Elements of this rank's whole shard space (sum of shard_numel).
  int64_t total_shard_numel() const { return total_shard_; }
  int64_t max_padded_numel() const { return max_padded_; }
  int64_t total_padded_numel() const { return total_padded_; }
  // Parameter pieces inside this rank's shards, in shard-space order (padding is in no piece).
  const std::vector<ShardPiece>& pieces() const { return pieces_; }

 private:
  ModelLayout layout_;
  int rank_ = 0;
  int64_t alignment_ = 1;
  std::vector<std::vector<bool>> decay_;  // [unit][param]
  std::vector<int64_t> shard_offsets_;    // per unit
  int64_t total_shard_ = 0;
  int64_t max_padded_ = 0;
  int64_t total_padded_ = 0;
  std::vector<ShardPiece> pieces_;
};

}  // namespace zw::zero
