// model/param_provider.h — where the model gets each unit's parameters and puts their gradients.
//
// The model (gpt.h) never knows whether its weights are one flat buffer in one process or a unit that ZeRO-3
// gathered from every rank: it asks a ParamProvider. acquire(u) is called right before the model computes with
// unit u and returns views of the unit's parameter values (and, in a backward pass, of where its gradients
// accumulate); release(u) right after, saying whether the unit's gradients for this micro step are complete —
// that is where a ZeRO-3 engine hangs prefetching the next unit, freeing the gathered buffer and reduce-scattering
// finished gradients. A unit may come back at another address the next time it is acquired (the model re-points
// its recorded views).
// Memory contract of UnitParams: `values` holds the unit's padded_numel elements of the model's compute dtype on
// the model's device, parameters at their layout offsets; `grads` (when asked for) padded_numel elements of the
// model's gradient dtype (the compute dtype on the CPU, f32 on CUDA), into which backward ACCUMULATES.
// FlatParams is the single-process provider: one flat buffer of values and one of gradients in layout order.
// Threading: one thread drives a model and its provider. Non-goals: streams and events (a device provider
// orders its copies on the model's stream, which it learns from the CudaContext it was built with).
#pragma once

#include "tensor/param_layout.h"
#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::model {

struct UnitParams {
  MemRef values;  // the unit's parameter values (padded_numel elements, compute dtype)
  MemRef grads;   // where their gradients accumulate (padded_numel elements, gradient dtype); empty: not asked
};

class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  // The unit's parameters, with gradients when `with_grads` (a backward pass).
  virtual Result<UnitParams> acquire(int unit, bool with_grads) = 0;
  // The model is done with the unit for now; `grads_final`: its gradients of this micro step are complete.
  virtual Status release(int unit, bool grads_final) = 0;
  // The factor the model multiplies the loss by before backward (fp16 loss scaling); 1 without scaling.
  virtual double loss_scale() const { return 1.0; }
};

// One flat buffer of values and one of gradients (either may be empty where not needed), laid out as `layout`
// (unit u at layout.units[u].offset elements). Element sizes: values_dtype and grads_dtype.
class FlatParams final : public ParamProvider {
 public:
  FlatParams(const tensor::ModelLayout& layout, MemRef values, DataType values_dtype, MemRef grads,
             DataType grads_dtype, double loss_scale = 1.0)
      : layout_(layout), values_(values), grads_(grads), values_dtype_(values_dtype), grads_dtype_(grads_dtype),
        loss_scale_(loss_scale) {}
  // Checks that both buffers hold layout.total_numel elements of their dtype.
  Status validate() const;
  Result<UnitParams> acquire(int unit, bool with_grads) override;
  Status release(int, bool) override { return Status(); }
  double loss_scale() const override { return loss_scale_; }
  void set_loss_scale(double scale) { loss_scale_ = scale; }

 private:
  const tensor::ModelLayout& layout_;
  MemRef values_, grads_;
  DataType values_dtype_, grads_dtype_;
  double loss_scale_;
};

}  // namespace zw::model
