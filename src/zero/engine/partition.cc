// zero/engine/partition.cc — unit padding for the world, shard offsets and the parameter pieces of this rank's shards.
//
// Non-goals: see partition.h.
#include "zero/engine/partition.h"

#include <algorithm>
#include <string>
#include <utility>

namespace zw::zero {

Result<PartitionManager> PartitionManager::create(const tensor::ModelLayout& model_layout, int rank, int world_size,
                                                  int64_t alignment) {
  if (world_size < 1 || rank < 0 || rank >= world_size || alignment < 1)
    return Status(Code::kInvalidArgument, "partition: need 0 <= rank < world_size and alignment >= 1, got rank " +
                                              std::to_string(rank) + ", world_size " + std::to_string(world_size) +
                                              ", alignment " + std::to_string(alignment));
  for (const tensor::UnitLayout& u : model_layout.units)
    for (const tensor::ParamLayout& p : u.params)
      if (p.numel() < 0)
        return Status(Code::kInvalidArgument, "partition: parameter " + p.name + " has a negative extent");
  const int64_t quantum = int64_t(world_size) * alignment;
  auto laid = tensor::make_layout(model_layout.units, quantum);
  if (!laid.ok()) return Status(laid.status().code(), "partition: " + laid.status().message());
  PartitionManager pm;
  pm.layout_ = std::move(laid.value());
  pm.rank_ = rank;
  pm.world_size_ = world_size;
  pm.alignment_ = alignment;
  // An empty unit still gets one quantum, so that every rank has a (padding-only) shard of it.
  int64_t offset = 0;
  for (tensor::UnitLayout& u : pm.layout_.units) {
    u.padded_numel = std::max(u.padded_numel, quantum);
    u.offset = offset;
    offset += u.padded_numel;
  }
  pm.layout_.total_numel = offset;
  for (size_t u = 0; u < pm.layout_.units.size(); ++u) {
    const tensor::UnitLayout& ul = pm.layout_.units[u];
    pm.max_padded_ = std::max(pm.max_padded_, ul.padded_numel);
    pm.shard_offsets_.push_back(pm.total_shard_);
    const int64_t S = ul.padded_numel / world_size;
    const int64_t lo = int64_t(rank) * S, hi = lo + S;
    for (size_t p = 0; p < ul.params.size(); ++p) {
      const tensor::ParamLayout& param = ul.params[p];
      const int64_t a = std::max(lo, param.offset), b = std::min(hi, param.offset + param.numel());
      if (a < b)
        pm.pieces_.push_back(ShardPiece{int(u), int(p), pm.total_shard_ + (a - lo), b - a, param.weight_decay});
    }
    pm.total_shard_ += S;
  }
  return pm;
}

}  // namespace zw::zero
