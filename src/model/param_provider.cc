// model/param_provider.cc — FlatParams: units as slices of two flat buffers.
//
// Non-goals: see param_provider.h.
#include "model/param_provider.h"

#include <string>

namespace zw::model {

Status FlatParams::validate() const {
  const size_t n = size_t(layout_.total_numel);
  if (values_.bytes < n * dtype_size(values_dtype_))
    return Status(Code::kInvalidArgument, "flat params: the values buffer holds " + std::to_string(values_.bytes) +
                                              " bytes, the layout needs " + std::to_string(n) + " elements of " +
                                              dtype_name(values_dtype_));
  if (grads_.bytes != 0 && grads_.bytes < n * dtype_size(grads_dtype_))
    return Status(Code::kInvalidArgument, "flat params: the gradient buffer holds " + std::to_string(grads_.bytes) +
                                              " bytes, the layout needs " + std::to_string(n) + " elements of " +
                                              dtype_name(grads_dtype_));
  return Status();
}

Result<UnitParams> FlatParams::acquire(int unit, bool with_grads) {
  if (unit < 0 || unit >= int(layout_.units.size()))
    return Status(Code::kInvalidArgument, "flat params: no unit " + std::to_string(unit));
  const tensor::UnitLayout& u = layout_.units[unit];
  UnitParams p;
  const size_t vs = dtype_size(values_dtype_), gs = dtype_size(grads_dtype_);
  p.values = values_.slice(size_t(u.offset) * vs, size_t(u.padded_numel) * vs);
  if (with_grads) {
    if (grads_.bytes == 0)
      return Status(Code::kInvalidArgument, "flat params: a backward pass needs gradients, but none were given");
    p.grads = grads_.slice(size_t(u.offset) * gs, size_t(u.padded_numel) * gs);
  }
  return p;
}

}  // namespace zw::model
