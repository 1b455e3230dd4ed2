// tensor/ops_layernorm.cc — layer normalization over the last dim, forward and backward.
//
// Backward, with xhat = (x - mean)·rstd and g = dout·weight per row of C elements:
//   dx = rstd · (g - mean(g) - xhat · mean(g · xhat)),  dweight += dout · xhat,  dbias += dout.
// f32 rows run the vectorized kernels of ops_vec.cc (same formulas, 16 partial sums); f64 keeps these loops.
// residual_layernorm_forward is the residual add followed by layernorm_forward here (one fused pass on CUDA).
// Non-goals: RMSNorm, a no-affine variant.
#include <cmath>
#include <string>
#include <type_traits>

#include "tensor/cuda/cuda_ops.h"
#include "tensor/ops.h"
#include "tensor/ops_internal.h"

namespace zw::tensor {

Shape layernorm_stats_shape(const Shape& inp) { return Shape{inp.rows()}; }

Status layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("layernorm_forward", "inp", inp, 1));
  const int64_t C = inp.shape.last(), N = inp.shape.rows();
  ZW_TRY(c.value("out", out, inp.shape));
  ZW_TRY(c.stats("mean", mean, Shape{N}));
  ZW_TRY(c.stats("rstd", rstd, Shape{N}));
  ZW_TRY(c.value("weight", weight, Shape{C}));
  ZW_TRY(c.value("bias", bias, Shape{C}));
  if (c.cuda()) return cuda::layernorm_forward(out, mean, rstd, inp, weight, bias);
  return detail::dispatch_float(c.op(), inp.dtype, [&](auto tag) {
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
                          const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                          GradInit init) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("layernorm_backward", "inp", inp, 1));
  const int64_t C = inp.shape.last(), N = inp.shape.rows();
  ZW_TRY(c.value("dout", dout, inp.shape));
  ZW_TRY(c.grad("dinp", dinp, inp.shape));
  ZW_TRY(c.value("weight", weight, Shape{C}));
  ZW_TRY(c.param_grad("dweight", dweight, Shape{C}));
  ZW_TRY(c.param_grad("dbias", dbias, Shape{C}));
  ZW_TRY(c.stats("mean", mean, Shape{N}));
  ZW_TRY(c.stats("rstd", rstd, Shape{N}));
  if (dinp.defined() && ranges_overlap(dinp.mem.ptr, dinp.bytes(), dout.mem.ptr, dout.bytes()))
    return c.error("dinp overlaps dout; pass a separate gradient buffer");
  if (c.cuda()) return cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, init);
  detail::zero_for_overwrite(dinp, init);
  return detail::dispatch_float(c.op(), inp.dtype, [&](auto tag) {
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

Status residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("residual_layernorm_forward", "a", a, 1));
  const int64_t C = a.shape.last(), N = a.shape.rows();
  ZW_TRY(c.value("b", b, a.shape));
  ZW_TRY(c.value("res", res, a.shape));
  ZW_TRY(c.value("out", out, a.shape));
  ZW_TRY(c.stats("mean", mean, Shape{N}));
  ZW_TRY(c.stats("rstd", rstd, Shape{N}));
  ZW_TRY(c.value("weight", weight, Shape{C}));
  ZW_TRY(c.value("bias", bias, Shape{C}));
  if (c.cuda()) return cuda::residual_layernorm_forward(res, out, mean, rstd, a, b, weight, bias);
  ZW_TRY(residual_forward(res, a, b));
  return layernorm_forward(out, mean, rstd, res, weight, bias);
}

}  // namespace zw::tensor
