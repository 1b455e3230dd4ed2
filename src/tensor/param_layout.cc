// tensor/param_layout.cc — laying out units of parameters in a flat buffer, finding them, their decay segments.
//
// Non-goals: see param_layout.h.
#include "tensor/param_layout.h"

#include <set>
#include <string>

namespace zw::tensor {

const ParamLayout* ModelLayout::find(const std::string& name, const UnitLayout** unit) const {
  for (const UnitLayout& u : units)
    for (const ParamLayout& p : u.params)
      if (p.name == name) {
        if (unit != nullptr) *unit = &u;
        return &p;
      }
  return nullptr;
}

Result<ModelLayout> make_layout(std::vector<UnitLayout> units, int64_t align) {
  if (align < 1) return Status(Code::kInvalidArgument, "layout: unit alignment must be >= 1, got " + std::to_string(align));
  ModelLayout layout;
  layout.unit_align = align;
  std::set<std::string> names;
  for (UnitLayout& u : units) {
    if (u.name.empty()) return Status(Code::kInvalidArgument, "layout: a unit has no name");
    if (!names.insert("unit:" + u.name).second)
      return Status(Code::kInvalidArgument, "layout: unit name " + u.name + " appears twice");
    u.numel = 0;
    for (ParamLayout& p : u.params) {
      if (p.name.empty()) return Status(Code::kInvalidArgument, "layout: a parameter of unit " + u.name + " has no name");
      if (!names.insert(p.name).second)
        return Status(Code::kInvalidArgument, "layout: parameter name " + p.name + " appears twice");
      if (p.numel() < 0)
        return Status(Code::kInvalidArgument, "layout: parameter " + p.name + " has shape " + p.shape.to_string());
      p.offset = u.numel;
      u.numel += p.numel();
    }
    u.offset = layout.total_numel;
    u.padded_numel = (u.numel + align - 1) / align * align;
    layout.total_numel += u.padded_numel;
    layout.num_params += u.numel;
  }
  layout.units = std::move(units);
  return layout;
}

std::vector<DecaySegment> decay_segments(const ModelLayout& layout) {
  std::vector<DecaySegment> out;
  for (const UnitLayout& u : layout.units)
    for (const ParamLayout& p : u.params) {
      const int64_t off = u.offset + p.offset;
      if (!out.empty() && out.back().decay == p.weight_decay && out.back().offset + out.back().numel == off)
        out.back().numel += p.numel();  // neighbours with one rule make one segment
      else if (p.numel() > 0)
        out.push_back(DecaySegment{off, p.numel(), p.weight_decay});
    }
  return out;
}

}  // namespace zw::tensor
