// zero/engine/engine_params.cc — EngineParams: a model's unit requests as the engine's fetch and release.
//
// Non-goals: see engine_params.h.
#include "zero/engine/engine_params.h"

#include <string>

namespace zw::zero {

Status EngineParams::check(const tensor::ModelLayout& model_layout) const {
  const tensor::ModelLayout& mine = engine_.partition().layout();
  auto differ = [](const std::string& what) {
    return Status(Code::kInvalidArgument, "engine params: the model's layout differs from the engine's: " + what +
                                              "; create the engine from the model's layout");
  };
  if (model_layout.units.size() != mine.units.size())
    return differ(std::to_string(model_layout.units.size()) + " units in the model, " +
                  std::to_string(mine.units.size()) + " in the engine");
  for (size_t u = 0; u < mine.units.size(); ++u) {
    const tensor::UnitLayout& a = model_layout.units[u];
    const tensor::UnitLayout& b = mine.units[u];
    if (a.name != b.name || a.params.size() != b.params.size() || a.padded_numel > b.padded_numel)
      return differ("unit " + std::to_string(u) + " is \"" + a.name + "\" with " + std::to_string(a.params.size()) +
                    " parameters in " + std::to_string(a.padded_numel) + " elements in the model, \"" + b.name +
                    "\" with " + std::to_string(b.params.size()) + " in " + std::to_string(b.padded_numel) +
                    " in the engine");
    for (size_t p = 0; p < b.params.size(); ++p) {
      const tensor::ParamLayout& x = a.params[p];
      const tensor::ParamLayout& y = b.params[p];
      if (x.name != y.name || !(x.shape == y.shape) || x.offset != y.offset)
        return differ("parameter " + std::to_string(p) + " of unit \"" + a.name + "\" is " + x.name +
                      x.shape.to_string() + " at " + std::to_string(x.offset) + " in the model, " + y.name +
                      y.shape.to_string() + " at " + std::to_string(y.offset) + " in the engine");
    }
  }
  return Status();
}

Result<model::UnitParams> EngineParams::acquire(int unit, bool with_grads) {
  ZW_ASSIGN_OR_RETURN(const UnitView view, engine_.fetch(unit, with_grads));
  return model::UnitParams{view.values, view.grads};
}

Status EngineParams::release(int unit, bool grads_final) { return engine_.release(unit, grads_final); }

}  // namespace zw::zero
