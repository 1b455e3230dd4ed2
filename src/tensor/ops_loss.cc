// tensor/ops_loss.cc — fused softmax + cross-entropy over the vocabulary, forward and backward.
//
// Forward per row: probs = softmax(logits) (max-subtracted), loss = logsumexp(logits) - logits[target].
// Backward: dlogits += dloss_per_position · (probs - onehot(target)); the softmax Jacobian folds away, so only
// probs are saved, and they may overwrite the logits. cross_entropy_forward_backward writes the gradient straight
// over the logits (one pass on CUDA, llm.c's fused classifier). reduce_sum lives here too (the mean loss and the
// gradient norm). Non-goals: ignore_index, label smoothing, vocabulary padding.
#include <cmath>
#include <string>

#include "tensor/cuda/cuda_ops.h"
#include "tensor/ops.h"
#include "tensor/ops_internal.h"

namespace zw::tensor {
namespace {

Shape rows_shape(const Shape& logits) {
  Shape s = logits;
  s.rank -= 1;
  s.dims[s.rank] = 0;
  return s;
}

// Checks shared by the three entry points: logits-like [..., V] primary, targets and losses of rows shape.
Status check_loss(const detail::Checker& c, const Tensor& logits, const Tensor& targets, const Tensor& losses) {
  ZW_TRY(c.ids("targets", targets, rows_shape(logits.shape)));
  return c.stats("losses", losses, rows_shape(logits.shape));
}

// Same memory or no shared byte: an in-place softmax is allowed, a shifted overlap is not.
Status same_or_apart(const detail::Checker& c, const char* a, const Tensor& x, const char* b, const Tensor& y) {
  if (x.mem.ptr != y.mem.ptr && ranges_overlap(x.mem.ptr, x.bytes(), y.mem.ptr, y.bytes()))
    return c.error(std::string(a) + " partly overlaps " + b + "; pass the same memory or separate buffers");
  return Status();
}

// Host rows: first target outside [0, V), as a usage error.
Status check_targets_host(const detail::Checker& c, const Tensor& targets, int64_t N, int64_t V) {
  const int32_t* tgt = targets.data<int32_t>();
  for (int64_t r = 0; r < N; ++r)
    if (tgt[r] < 0 || tgt[r] >= V)
      return c.error("target " + std::to_string(tgt[r]) + " at position " + std::to_string(r) +
                     " is outside the vocabulary [0, " + std::to_string(V) + ")");
  return Status();
}

// One row on the host: p = softmax(z) (p may be z), returns -log p[target]; reads z[target] before writing p.
template <typename F>
F softmax_loss_row(F* p, const F* z, int64_t V, int32_t target) {
  const F zt = z[target];
  F maxv = z[0];
  for (int64_t i = 1; i < V; ++i) maxv = z[i] > maxv ? z[i] : maxv;
  F sum = 0;
  for (int64_t i = 0; i < V; ++i) {
    p[i] = std::exp(z[i] - maxv);
    sum += p[i];
  }
  const F inv = F(1) / sum;
  for (int64_t i = 0; i < V; ++i) p[i] *= inv;
  return std::log(sum) + maxv - zt;
}

}  // namespace

Status cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets,
                             double* mean_loss) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("cross_entropy_forward", "logits", logits, 2));
  const int64_t N = logits.shape.rows(), V = logits.shape.last();
  ZW_TRY(c.value("probs", probs, logits.shape));
  ZW_TRY(check_loss(c, logits, targets, losses));
  ZW_TRY(same_or_apart(c, "probs", probs, "logits", logits));
  if (c.cuda()) {
    if (mean_loss != nullptr)
      return c.error("mean_loss must be null for device tensors (reduce_sum the losses on the device)");
    return cuda::cross_entropy_forward(losses, probs, logits, targets);
  }
  ZW_TRY(check_targets_host(c, targets, N, V));
  const int32_t* tgt = targets.data<int32_t>();
  return detail::dispatch_float(c.op(), logits.dtype, [&](auto tag) {
    using F = decltype(tag);
    double total = 0;
    for (int64_t r = 0; r < N; ++r) {
      const F loss = softmax_loss_row(probs.data<F>() + r * V, logits.data<F>() + r * V, V, tgt[r]);
      losses.data<F>()[r] = loss;
      total += double(loss);
    }
    if (mean_loss != nullptr) *mean_loss = N > 0 ? total / double(N) : 0.0;
    return Status();
  });
}

Status cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              double dloss_per_position, GradInit init) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("cross_entropy_backward", "probs", probs, 2));
  const int64_t N = probs.shape.rows(), V = probs.shape.last();
  ZW_TRY(c.ids("targets", targets, rows_shape(probs.shape)));
  ZW_TRY(c.grad("dlogits", dlogits, probs.shape));
  if (!dlogits.defined()) return Status();
  ZW_TRY(same_or_apart(c, "dlogits", dlogits, "probs", probs));
  if (dlogits.mem.ptr == probs.mem.ptr && init != GradInit::kOverwrite)
    return c.error("dlogits is the probs' memory, which only GradInit::kOverwrite allows");
  if (c.cuda()) return cuda::cross_entropy_backward(dlogits, probs, targets, dloss_per_position, init);
  ZW_TRY(check_targets_host(c, targets, N, V));
  const int32_t* tgt = targets.data<int32_t>();
  return detail::dispatch_float(c.op(), probs.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F scale = F(dloss_per_position);
    const bool add = init == GradInit::kAccumulate;
    for (int64_t r = 0; r < N; ++r) {
      const F* p = probs.data<F>() + r * V;
      F* d = dlogits.data<F>() + r * V;
      for (int64_t i = 0; i < V; ++i) {
        const F g = scale * (p[i] - (i == tgt[r] ? F(1) : F(0)));
        d[i] = add ? d[i] + g : g;
      }
    }
    return Status();
  });
}

Status cross_entropy_forward_backward(const Tensor& losses, const Tensor& dlogits, const Tensor& logits,
                                      const Tensor& targets, double dloss_per_position) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c,
                      detail::Checker::make("cross_entropy_forward_backward", "logits", logits, 2));
  const int64_t N = logits.shape.rows(), V = logits.shape.last();
  ZW_TRY(c.value("dlogits", dlogits, logits.shape));
  ZW_TRY(check_loss(c, logits, targets, losses));
  ZW_TRY(same_or_apart(c, "dlogits", dlogits, "logits", logits));
  if (c.cuda()) return cuda::cross_entropy_forward_backward(losses, dlogits, logits, targets, dloss_per_position);
  ZW_TRY(check_targets_host(c, targets, N, V));
  const int32_t* tgt = targets.data<int32_t>();
  return detail::dispatch_float(c.op(), logits.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F scale = F(dloss_per_position);
    for (int64_t r = 0; r < N; ++r) {
      F* d = dlogits.data<F>() + r * V;
      losses.data<F>()[r] = softmax_loss_row(d, logits.data<F>() + r * V, V, tgt[r]);
      for (int64_t i = 0; i < V; ++i) d[i] = scale * (d[i] - (i == tgt[r] ? F(1) : F(0)));
    }
    return Status();
  });
}

Status reduce_sum(const Tensor& out, const Tensor& x, bool squares) {
  const char* op = squares ? "reduce_sum(squares)" : "reduce_sum";
  if (!x.defined() && x.numel() != 0) return Status(Code::kInvalidArgument, std::string(op) + ": x is undefined");
  if (x.on_host()) {
    if (!out.on_host() || out.dtype != DataType::kFloat32 || out.numel() != 1 || !out.defined())
      return Status(Code::kInvalidArgument, std::string(op) + ": out is " + out.describe() + ", expected f32[1] on the host");
    double sum = 0;
    const int64_t n = x.numel();
    auto add = [&](double v) { sum += squares ? v * v : v; };
    switch (x.dtype) {
      case DataType::kFloat32:
        for (int64_t i = 0; i < n; ++i) add(x.data<float>()[i]);
        break;
      case DataType::kFloat64:
        for (int64_t i = 0; i < n; ++i) add(x.data<double>()[i]);
        break;
      default:
        return Status(Code::kUnsupported, std::string(op) + ": x is " + x.describe() + "; the CPU sums f32 or f64");
    }
    out.data<float>()[0] = static_cast<float>(sum);
    return Status();
  }
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make(op, "x", x, 0));
  ZW_TRY(c.check("out", out, DataType::kFloat32, Shape{1}));
  return cuda::reduce_sum(out, x, squares);
}

}  // namespace zw::tensor
