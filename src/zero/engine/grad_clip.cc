// zero/engine/grad_clip.cc — sum of squares in double, the one all-reduce, DeepSpeed's combined scale.
// Non-goals: rewriting gradients (the factor is fused into the optimizer step).
#include "zero/engine/grad_clip.h"

#include <cmath>
#include <string>

#include "kernels/element.h"

namespace zw::zero {
namespace {

constexpr int kLanes = 8;  // independent accumulators: lets the compiler vectorize without reassociating

template <typename T, typename ToFloat>
double sum_sq(const T* x, size_t n, ToFloat to_float) {
  double acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double d = to_float(x[i + l]);
      acc[l] += d * d;
    }
  }
  for (int l = 0; i < n; ++i, ++l) {
    const double d = to_float(x[i]);
    acc[l] += d * d;
  }
  double total = 0.0;
  for (double a : acc) total += a;
  return total;
}

}  // namespace

Result<double> sum_of_squares(const GradSpan& g) {
  if (g.data == nullptr && g.count != 0)
    return Status(Code::kInvalidArgument, "gradient span of " + std::to_string(g.count) + " elements has no data");
  switch (g.dtype) {
    case DataType::kFloat32:
      return sum_sq(static_cast<const float*>(g.data), g.count, [](float v) { return v; });
    case DataType::kFloat16:
      return sum_sq(static_cast<const uint16_t*>(g.data), g.count, [](uint16_t v) { return kernels::f16_to_f32(v); });
    case DataType::kBFloat16:
      return sum_sq(static_cast<const uint16_t*>(g.data), g.count, [](uint16_t v) { return kernels::bf16_to_f32(v); });
    default:
      return Status(Code::kInvalidArgument, std::string("gradient norm over dtype ") + dtype_name(g.dtype) +
                                                ": only float, half and bfloat16 are supported");
  }
}

Result<double> global_grad_norm(Communicator& comm, std::span<const GradSpan> shards) {
  double local = 0.0;
  for (const GradSpan& g : shards) {
    ZW_ASSIGN_OR_RETURN(double s, sum_of_squares(g));
    local += s;
  }
  CollectiveOptions o;
  o.input = MemRef::host(&local, sizeof local);
  o.output = o.input;
  o.count = 1;
  o.dtype = DataType::kFloat64;
  o.op = ReduceOp::kSum;
  ZW_ASSIGN_OR_RETURN(Work work, all_reduce(comm, o));
  ZW_TRY(work.wait());
  return std::sqrt(local);
}

ClipResult clip_from_norm(double scaled_norm, double loss_scale, double max_norm) {
  ClipResult r;
  r.scaled_norm = scaled_norm;
  r.norm = scaled_norm / loss_scale;
  r.finite = std::isfinite(scaled_norm);
  double combined = loss_scale;
  if (max_norm > 0.0 && r.finite) {
    const double clip = (r.norm + 1e-6) / max_norm;
    if (clip > 1.0) {
      combined = clip * loss_scale;
      r.clip_coef = 1.0 / clip;
    }
  }
  r.grad_scale = static_cast<float>(1.0 / combined);
  return r;
}

Result<ClipResult> clip_grad_scale(Communicator& comm, std::span<const GradSpan> shards, double loss_scale,
                                   double max_norm) {
  if (!(loss_scale > 0.0) || !std::isfinite(loss_scale))
    return Status(Code::kInvalidArgument, "clip_grad_scale: loss scale " + std::to_string(loss_scale) + " on rank " +
                                              std::to_string(comm.rank()) + " must be positive and finite");
  ZW_ASSIGN_OR_RETURN(double norm, global_grad_norm(comm, shards));
  return clip_from_norm(norm, loss_scale, max_norm);
}

}  // namespace zw::zero
