// zero/partition.cc — unit padding, shard offsets and the parameter pieces of this rank's shards.
//
// Non-goals: see partition.h.
#include "zero/partition.h"

#include <algorithm>

namespace zw::zero {

Result<PartitionManager> PartitionManager::create(std::vector<UnitSpec> units, int rank, int world_size,
                                                  int64_t alignment) {
  if (world_size < 1 || rank < 0 || rank >= world_size || alignment < 1)
    return Status(Code::kInvalidArgument, "partition: need 0 <= rank < world_size and alignment >= 1, got rank " +
                                              std::to_string(rank) + ", world_size " + std::to_string(world_size) +
                                              ", alignment " + std::to_string(alignment));
  PartitionManager pm;
  pm.rank_ = rank;
  pm.alignment_ = alignment;
  pm.layout_.world_size = world_size;
  const int64_t quantum = int64_t(world_size) * alignment;
  for (size_t u = 0; u < units.size(); ++u) {
    UnitLayout ul;
    ul.name = units[u].name;
    std::vector<bool> decay;
    for (ParamSpec& p : units[u].params) {
      ParamLayout pl{p.name, p.shape, ul.numel};
      if (pl.numel() < 0)
        return Status(Code::kInvalidArgument, "partition: parameter " + p.name + " has a negative extent");
      ul.numel += pl.numel();
      ul.params.push_back(std::move(pl));
      decay.push_back(p.weight_decay);
    }
    ul.padded_numel = std::max<int64_t>(1, (ul.numel + quantum - 1) / quantum) * quantum;
    pm.max_padded_ = std::max(pm.max_padded_, ul.padded_numel);
    pm.total_padded_ += ul.padded_numel;
    pm.shard_offsets_.push_back(pm.total_shard_);
    const int64_t S = ul.padded_numel / world_size;
    const int64_t lo = int64_t(rank) * S, hi = lo + S;
    for (size_t p = 0; p < ul.params.size(); ++p) {
      const int64_t a = std::max(lo, ul.params[p].offset), b = std::min(hi, ul.params[p].offset + ul.params[p].numel());
      if (a < b) pm.pieces_.push_back(ShardPiece{int(u), int(p), pm.total_shard_ + (a - lo), b - a, decay[p]});
    }
    pm.total_shard_ += S;
    pm.layout_.units.push_back(std::move(ul));
    pm.decay_.push_back(std::move(decay));
  }
  return pm;
}

std::vector<UnitSpec> PartitionManager::gpt_units(const tensor::GptLayout& layout) {
  std::vector<UnitSpec> out;
  for (const tensor::Unit& u : layout.units) {
    UnitSpec spec{u.name, {}};
    for (const tensor::ParamSlot& s : u.slots)
      spec.params.push_back(
          ParamSpec{s.name, std::vector<int64_t>(s.shape.dims, s.shape.dims + s.shape.rank), s.weight_decay});
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace zw::zero
