// zero/checkpoint/checkpoint_reshard.cc — which old ranks' element ranges fill a new rank's shard, parameter by
// parameter.
//
// For each parameter, the part of its new range [offset, offset + numel) inside the new shard maps to the same
// elements at its old offset; that old range is cut at the old shard boundaries (k·S_old). Offsets and padding
// may differ between the layouts; only unit names, parameter names and shapes must agree.
// Non-goals: renaming or reshaping parameters across checkpoints.
#include <algorithm>

#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/checkpoint_index.h"

namespace zw::zero {
namespace {

Status mismatch(const std::string& what) {
  return Status(Code::kInvalidArgument,
                "the checkpoint does not fit the model: " + what + "; load it into the model it was saved from");
}

Status compare_units(const tensor::UnitLayout& a, const tensor::UnitLayout& b) {
  if (a.name != b.name) return mismatch("unit \"" + a.name + "\" in the checkpoint is \"" + b.name + "\" in the model");
  for (size_t p = 0; p < std::min(a.params.size(), b.params.size()); ++p) {
    const tensor::ParamLayout& x = a.params[p];
    const tensor::ParamLayout& y = b.params[p];
    if (x.name != y.name)
      return mismatch("parameter #" + std::to_string(p) + " of unit \"" + a.name + "\" is \"" + x.name +
                      "\" in the checkpoint but \"" + y.name + "\" in the model");
    if (x.shape != y.shape)
      return mismatch("parameter \"" + x.name + "\" has shape " + x.shape.to_string() + " in the checkpoint but " +
                      y.shape.to_string() + " in the model");
  }
  if (a.params.size() != b.params.size()) {
    const bool more = a.params.size() > b.params.size();
    const tensor::ParamLayout& extra = more ? a.params[b.params.size()] : b.params[a.params.size()];
    return mismatch("unit \"" + a.name + "\" has " + std::to_string(a.params.size()) +
                    " parameters in the checkpoint and " + std::to_string(b.params.size()) +
                    " in the model; first unmatched: \"" + extra.name + "\" (only in the " +
                    (more ? "checkpoint" : "model") + ")");
  }
  return Status();
}

Status compare_layouts(const tensor::ModelLayout& saved, const tensor::ModelLayout& target) {
  for (size_t u = 0; u < std::min(saved.units.size(), target.units.size()); ++u)
    ZW_TRY(compare_units(saved.units[u], target.units[u]));
  if (saved.units.size() != target.units.size()) {
    const bool more = saved.units.size() > target.units.size();
    const tensor::UnitLayout& extra = more ? saved.units[target.units.size()] : target.units[saved.units.size()];
    return mismatch("the checkpoint has " + std::to_string(saved.units.size()) + " units and the model " +
                    std::to_string(target.units.size()) + "; first unmatched: \"" + extra.name + "\" (only in the " +
                    (more ? "checkpoint" : "model") + ")");
  }
  return Status();
}

void add_segment(std::vector<CopySegment>& out, const CopySegment& s) {
  if (!out.empty()) {
    CopySegment& last = out.back();
    if (last.old_rank == s.old_rank && last.src + last.count == s.src && last.dst + last.count == s.dst) {
      last.count += s.count;
      return;
    }
  }
  out.push_back(s);
}

std::vector<CopySegment> plan_unit(const tensor::UnitLayout& old_unit, int old_world,
                                   const tensor::UnitLayout& new_unit, int new_world, int new_rank) {
  std::vector<CopySegment> out;
  const int64_t s_old = old_unit.padded_numel / old_world;
  const int64_t s_new = new_unit.padded_numel / new_world;
  const int64_t lo = new_rank * s_new, hi = lo + s_new;
  for (size_t p = 0; p < new_unit.params.size(); ++p) {
    const tensor::ParamLayout& q = new_unit.params[p];
    const int64_t a = std::max(lo, q.offset), b = std::min(hi, q.offset + q.numel());
    if (a >= b) continue;
    int64_t cur_old = old_unit.params[p].offset + (a - q.offset);
    const int64_t end_old = cur_old + (b - a);
    int64_t cur_new = a;
    while (cur_old < end_old) {
      const int64_t k = cur_old / s_old;
      const int64_t len = std::min(end_old, (k + 1) * s_old) - cur_old;
      add_segment(out, CopySegment{static_cast<int>(k), cur_old - k * s_old, cur_new - lo, len});
      cur_old += len;
      cur_new += len;
    }
  }
  return out;
}

}  // namespace

Result<std::vector<std::vector<CopySegment>>> plan_reshard(const tensor::ModelLayout& saved, int saved_world,
                                                           const tensor::ModelLayout& target, int target_world,
                                                           int new_rank) {
  ZW_TRY(validate_layout(saved, saved_world, "checkpoint layout"));
  ZW_TRY(validate_layout(target, target_world, "model layout"));
  if (new_rank < 0 || new_rank >= target_world)
    return Status(Code::kInvalidArgument, "rank " + std::to_string(new_rank) + " outside the model layout's world of " +
                                              std::to_string(target_world));
  ZW_TRY(compare_layouts(saved, target));
  std::vector<std::vector<CopySegment>> plan;
  for (size_t u = 0; u < target.units.size(); ++u)
    plan.push_back(plan_unit(saved.units[u], saved_world, target.units[u], target_world, new_rank));
  return plan;
}

}  // namespace zw::zero
