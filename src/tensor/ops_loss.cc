// tensor/ops_loss.cc — fused softmax + cross-entropy over the vocabulary, forward and backward.
//
// Forward per row: probs = softmax(logits) (max-subtracted), loss = logsumexp(logits) - logits[target].
// Backward: dlogits += dloss_per_position · (probs - onehot(target)); the softmax Jacobian folds away, so only
// probs are saved. Non-goals: ignore_index, label smoothing, vocabulary padding.
#include <cmath>
#include <string>

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

}  // namespace

Status cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets,
                             double* mean_loss) {
  const char* op = "cross_entropy_forward";
  ZW_TRY(detail::check_rank(op, "logits", logits, logits.dtype, 2));
  const int64_t N = logits.shape.rows(), V = logits.shape.last();
  ZW_TRY(detail::check(op, "probs", probs, logits.dtype, logits.shape));
  ZW_TRY(detail::check(op, "targets", targets, DataType::kInt32, rows_shape(logits.shape)));
  ZW_TRY(detail::check(op, "losses", losses, logits.dtype, rows_shape(logits.shape)));
  const int32_t* tgt = targets.data<int32_t>();
  for (int64_t r = 0; r < N; ++r)
    if (tgt[r] < 0 || tgt[r] >= V)
      return Status(Code::kInvalidArgument, std::string(op) + ": target " + std::to_string(tgt[r]) + " at position " +
                                                std::to_string(r) + " is outside the vocabulary [0, " +
                                                std::to_string(V) + ")");
  return detail::dispatch_float(op, logits.dtype, [&](auto tag) {
    using F = decltype(tag);
    double total = 0;
    for (int64_t r = 0; r < N; ++r) {
      const F* z = logits.data<F>() + r * V;
      F* p = probs.data<F>() + r * V;
      F maxv = z[0];
      for (int64_t i = 1; i < V; ++i) maxv = z[i] > maxv ? z[i] : maxv;
      F sum = 0;
      for (int64_t i = 0; i < V; ++i) {
        p[i] = std::exp(z[i] - maxv);
        sum += p[i];
      }
      const F inv = F(1) / sum;
      for (int64_t i = 0; i < V; ++i) p[i] *= inv;
      const F loss = std::log(sum) + maxv - z[tgt[r]];
      losses.data<F>()[r] = loss;
      total += double(loss);
    }
    if (mean_loss != nullptr) *mean_loss = N > 0 ? total / double(N) : 0.0;
    return Status();
  });
}

Status cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              double dloss_per_position) {
  const char* op = "cross_entropy_backward";
  ZW_TRY(detail::check_rank(op, "probs", probs, probs.dtype, 2));
  const int64_t N = probs.shape.rows(), V = probs.shape.last();
  ZW_TRY(detail::check(op, "targets", targets, DataType::kInt32, rows_shape(probs.shape)));
  ZW_TRY(detail::check_optional(op, "dlogits", dlogits, probs.dtype, probs.shape));
  if (!dlogits.defined()) return Status();
  const int32_t* tgt = targets.data<int32_t>();
  return detail::dispatch_float(op, probs.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F scale = F(dloss_per_position);
    for (int64_t r = 0; r < N; ++r) {
      const F* p = probs.data<F>() + r * V;
      F* d = dlogits.data<F>() + r * V;
      for (int64_t i = 0; i < V; ++i) d[i] += scale * (p[i] - (i == tgt[r] ? F(1) : F(0)));
    }
    return Status();
  });
}

}  // namespace zw::tensor
