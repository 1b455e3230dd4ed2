// zero/engine/engine_params.h — the ZeRO-3 engine as a model's ParamProvider (model/param_provider.h).
//
// A model asks for each unit right before computing with it and releases it right after; EngineParams turns that
// into the engine's fetch and release, which is where prefetching the next units, freeing gather buffers and
// reduce-scattering finished gradients hang (engine.h). A training micro step is then
//   engine.begin_micro_step(); model.forward(params, ...); model.backward(params); engine.end_micro_step();
// and an evaluation pass engine.begin_eval(); model.forward(params, ..., kEval); engine.end_eval().
// Memory: the engine hands out f32 host views of each unit as ITS layout pads it (to world_size × alignment). The
// model's layout must have the same units and parameters at the same unit-relative offsets and pad no unit beyond
// that (check() says whether it does); making it with unit_align = world_size × alignment gives the same layout
// everywhere, flat offsets included.
// Threading: the engine's (one thread). Non-goals: owning the engine, device memory (the engine's buffers are host
// memory, so the model runs on the CPU in f32).
#pragma once

#include "model/param_provider.h"
#include "zero/engine/engine.h"

namespace zw::zero {

class EngineParams final : public model::ParamProvider {
 public:
  explicit EngineParams(Engine& engine) : engine_(engine) {}
  // Whether a model laid out as `model_layout` can run on this engine's units: the same units and parameters (names,
  // shapes, unit-relative offsets) and no unit padded beyond the engine's. The error names the first difference.
  Status check(const tensor::ModelLayout& model_layout) const;
  // engine.fetch(unit, with_grads): the gathered unit's values and, with_grads, its gradient buffer.
  Result<model::UnitParams> acquire(int unit, bool with_grads) override;
  // engine.release(unit, grads_final).
  Status release(int unit, bool grads_final) override;
  // The engine's current loss scale (fp16; 1 otherwise).
  double loss_scale() const override { return engine_.loss_scale(); }

 private:
  Engine& engine_;
};

}  // namespace zw::zero
