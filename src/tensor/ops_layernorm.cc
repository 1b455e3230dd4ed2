// tensor/ops_layernorm.cc — layer normalization over the last dim, forward and backward.
//
// Backward, with xhat = (x - mean)·rstd and g = dout·weight per row of C elements:
//   dx = rstd · (g - mean(g) - xhat · mean(g · xhat)),  dweight += dout · xhat,  dbias += dout.
// f32 rows run the vectorized kernels of ops_vec.cc (same formulas, 16 partial sums); f64 keeps these loops.
// Non-goals: RMSNorm, a no-affine variant.
#include <cmath>
#include <string>
#include <type_traits>

#include "tensor/ops.h"
#include "tensor/ops_internal.h"

namespace zw::tensor {

Shape layernorm_stats_shape(const Shape& inp) { return Shape{inp.rows()}; }

Status layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias) {
  const char* op = "layernorm_forward";
  ZW_TRY(detail::check_rank(op, "inp", inp, inp.dtype, 1));
  const int64_t C = inp.shape.last(), N = inp.shape.rows();
  ZW_TRY(detail::check(op, "out", out, inp.dtype, inp.shape));
  ZW_TRY(detail::check(op, "mean", mean, inp.dtype, Shape{N}));
  ZW_TRY(detail::check(op, "rstd", rstd, inp.dtype, Shape{N}));
  ZW_TRY(detail::check(op, "weight", weight, inp.dtype, Shape{C}));
  ZW_TRY(detail::check(op, "bias", bias, inp.dtype, Shape{C}));
  return detail::dispatch_float(op, inp.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* w = weight.data<F>();
    const F* b = bias.data<F>();
    if constexpr (std::is_same_v<F, float>) {
      for (int64_t r = 0; r < N; ++r) {
        float stats[2];
        detail::layernorm_forward_row_f32(out.data<F>() + r * C, stats, inp.data<F>() + r * C, w, b, C,
                                          float(kLayerNormEps));
        mean.data<F>()[r] = stats[0];
        rstd.data<F>()[r] = stats[1];
      }
      return Status();
    }
    for (int64_t r = 0; r < N; ++r) {
      const F* x = inp.data<F>() + r * C;
      F* y = out.data<F>() + r * C;
      F m = 0;
      for (int64_t c = 0; c < C; ++c) m += x[c];
      m /= F(C);
      F var = 0;
      for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
      var /= F(C);
      const F s = F(1) / std::sqrt(var + F(kLayerNormEps));
      for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * w[c] + b[c];
      mean.data<F>()[r] = m;
      rstd.data<F>()[r] = s;
    }
    return Status();
  });
}

Status layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_backward";
  ZW_TRY(detail::check_rank(op, "inp", inp, inp.dtype, 1));
  const int64_t C = inp.shape.last(), N = inp.shape.rows();
  ZW_TRY(detail::check(op, "dout", dout, inp.dtype, inp.shape));
  ZW_TRY(detail::check_optional(op, "dinp", dinp, inp.dtype, inp.shape));
  ZW_TRY(detail::check(op, "weight", weight, inp.dtype, Shape{C}));
  ZW_TRY(detail::check_optional(op, "dweight", dweight, inp.dtype, Shape{C}));
  ZW_TRY(detail::check_optional(op, "dbias", dbias, inp.dtype, Shape{C}));
  ZW_TRY(detail::check(op, "mean", mean, inp.dtype, Shape{N}));
  ZW_TRY(detail::check(op, "rstd", rstd, inp.dtype, Shape{N}));
  return detail::dispatch_float(op, inp.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* w = weight.data<F>();
    F* dw = dweight.data<F>();
    F* db = dbias.data<F>();
    if constexpr (std::is_same_v<F, float>) {
      for (int64_t r = 0; r < N; ++r)
        detail::layernorm_backward_row_f32(dinp.defined() ? dinp.data<F>() + r * C : nullptr, dw, db,
                                           dout.data<F>() + r * C, inp.data<F>() + r * C, w, mean.data<F>()[r],
                                           rstd.data<F>()[r], C);
      return Status();
    }
    for (int64_t r = 0; r < N; ++r) {
      const F* x = inp.data<F>() + r * C;
      const F* dy = dout.data<F>() + r * C;
      const F m = mean.data<F>()[r], s = rstd.data<F>()[r];
      F g_mean = 0, gx_mean = 0;
      for (int64_t c = 0; c < C; ++c) {
        const F g = dy[c] * w[c];
        g_mean += g;
        gx_mean += g * (x[c] - m) * s;
      }
      g_mean /= F(C);
      gx_mean /= F(C);
      F* dx = dinp.defined() ? dinp.data<F>() + r * C : nullptr;
      for (int64_t c = 0; c < C; ++c) {
        const F xhat = (x[c] - m) * s;
        if (dw != nullptr) dw[c] += dy[c] * xhat;
        if (db != nullptr) db[c] += dy[c];
        if (dx != nullptr) dx[c] += s * (dy[c] * w[c] - g_mean - xhat * gx_mean);
      }
    }
    return Status();
  });
}

}  // namespace zw::tensor
