// zero/engine/partition.h — the ZeRO-3 partition manager: lays a model's units out for the world and cuts them into
// shards.
//
// The model describes its parameters once, as a tensor::ModelLayout (tensor/param_layout.h): units of named,
// shaped parameters. The partition manager re-lays those units out padded to a multiple of world_size × alignment
// elements (an empty unit still gets one such quantum, so every rank owns a shard of every unit). A unit buffer is
// rank-major: rank r owns the contiguous shard [r·S, (r+1)·S), S = padded_numel / world_size. This rank keeps only
// its shards, concatenated unit after unit into one "shard space" (the same offsets index the fp32 master weights,
// the reduced gradients and Adam's m and v). Parameters are views into a gathered unit buffer, so the unpadded
// shapes are metadata only; the padded layout is also what the sharded checkpoint records (zero/checkpoint/).
// Threading: immutable after create(); any thread may read it.
// Non-goals: owning memory (the engine does), knowing the model, tensor/pipeline parallel layouts, per-parameter
// dtypes.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/param_layout.h"
#include "zerowire/status.h"

namespace zw::zero {

// The part of one parameter that falls inside this rank's shard of its unit.
struct ShardPiece {
  int unit = 0;               // unit index
  int param = 0;              // parameter index within the unit
  int64_t shard_offset = 0;   // element offset in this rank's shard space
  int64_t numel = 0;          // elements of the parameter inside the shard
  bool weight_decay = false;  // the parameter's ParamLayout::weight_decay
};

class PartitionManager {
 public:
  PartitionManager() = default;
  // Lays model_layout's units (names, parameter names, shapes and decay flags; its own padding is ignored) out
  // padded to world_size × alignment elements (alignment >= 1), parameters back to back as tensor::make_layout
  // places them. Errors: rank outside [0, world_size), alignment < 1, a parameter with a negative extent, and
  // make_layout's (empty or repeated names).
  static Result<PartitionManager> create(const tensor::ModelLayout& model_layout, int rank, int world_size,
                                         int64_t alignment);

  // The padded layout (unit_align = world_size × alignment): what is gathered, reduced and checkpointed.
  const tensor::ModelLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t alignment() const { return alignment_; }  // elements; units are padded to world_size × alignment
  int num_units() const { return static_cast<int>(layout_.units.size()); }
  const tensor::UnitLayout& unit(int u) const { return layout_.units[u]; }
  bool weight_decay(int u, int p) const { return layout_.units[u].params[p].weight_decay; }

  int64_t shard_numel(int u) const { return layout_.units[u].padded_numel / world_size_; }
  // Offset of unit u's shard in this rank's shard space.
  int64_t shard_offset(int u) const { return shard_offsets_[u]; }
  // Elements of this rank's whole shard space (sum of shard_numel).
  int64_t total_shard_numel() const { return total_shard_; }
  int64_t max_padded_numel() const { return max_padded_; }
  int64_t total_padded_numel() const { return layout_.total_numel; }
  // Parameter pieces inside this rank's shards, in shard-space order (padding is in no piece).
  const std::vector<ShardPiece>& pieces() const { return pieces_; }

 private:
  tensor::ModelLayout layout_;
  int rank_ = 0;
  int world_size_ = 1;
  int64_t alignment_ = 1;
  std::vector<int64_t> shard_offsets_;  // per unit
  int64_t total_shard_ = 0;
  int64_t max_padded_ = 0;
  std::vector<ShardPiece> pieces_;
};

}  // namespace zw::zero
