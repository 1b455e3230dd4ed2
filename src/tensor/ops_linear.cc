// tensor/ops_linear.cc — fully connected layer out = inp · Wᵀ + b through cblas_sgemm / cblas_dgemm (CPU) or
// cuBLASLt (cuda/linear.cu), and the MLP's linear + GELU pair (linear_gelu_forward, linear_backward_gelu).
//
// Backward: dinp += dout · W,  dW += doutᵀ · inp,  db += column sums of dout (all gemms with beta = 1, which is
// how the accumulate contract comes for free; beta = 0 for dinp with kOverwrite). Non-goals: batched or strided
// matmul, int8.
#include <climits>
#include <string>

#include "tensor/cuda/cuda_ops.h"
#include "tensor/ops.h"
#include "tensor/ops_internal.h"

namespace zw::tensor {
namespace {

Status check_dims(const char* op, int64_t n, int64_t c, int64_t oc) {
  if (n > INT_MAX || c > INT_MAX || oc > INT_MAX)
    return Status(Code::kUnsupported, std::string(op) + ": a dimension exceeds the 32-bit BLAS interface");
  return Status();
}

Shape with_last(Shape s, int64_t last) {
  s.dims[s.rank - 1] = last;
  return s;
}

}  // namespace

Status linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("linear_forward", "inp", inp, 1));
  ZW_TRY(c.rank("weight", weight, c.dtype(), 2));
  const int64_t N = inp.shape.rows(), C = inp.shape.last(), OC = weight.shape[0];
  ZW_TRY(c.value("weight", weight, Shape{OC, C}));
  ZW_TRY(c.check("bias", bias, c.dtype(), Shape{OC}, true));
  ZW_TRY(c.value("out", out, with_last(inp.shape, OC)));
  ZW_TRY(check_dims(c.op(), N, C, OC));
  if (c.cuda()) return cuda::linear_forward(out, inp, weight, bias);
  return detail::dispatch_float(c.op(), inp.dtype, [&](auto tag) {
    using F = decltype(tag);
    F* o = out.data<F>();
    F beta = 0;
    if (bias.defined()) {
      const F* b = bias.data<F>();
      for (int64_t r = 0; r < N; ++r)
        for (int64_t j = 0; j < OC; ++j) o[r * OC + j] = b[j];
      beta = 1;
    }
    if (N > 0 && OC > 0)
      detail::gemm(false, true, int(N), int(OC), int(C), F(1), inp.data<F>(), int(C), weight.data<F>(), int(C), beta, o,
                   int(OC));
    return Status();
  });
}

Status linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight, GradInit init) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("linear_backward", "inp", inp, 1));
  ZW_TRY(c.rank("weight", weight, c.dtype(), 2));
  const int64_t N = inp.shape.rows(), C = inp.shape.last(), OC = weight.shape[0];
  ZW_TRY(c.value("weight", weight, Shape{OC, C}));
  ZW_TRY(c.value("dout", dout, with_last(inp.shape, OC)));
  ZW_TRY(c.grad("dinp", dinp, inp.shape));
  ZW_TRY(c.param_grad("dweight", dweight, weight.shape));
  ZW_TRY(c.param_grad("dbias", dbias, Shape{OC}));
  ZW_TRY(check_dims(c.op(), N, C, OC));
  if (dinp.defined() && ranges_overlap(dinp.mem.ptr, dinp.bytes(), dout.mem.ptr, dout.bytes()))
    return c.error("dinp overlaps dout; pass a separate gradient buffer");
  if (N == 0) return Status();
  if (c.cuda()) return cuda::linear_backward(dinp, dweight, dbias, dout, inp, weight, init);
  return detail::dispatch_float(c.op(), inp.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* d = dout.data<F>();
    if (dinp.defined())
      detail::gemm(false, false, int(N), int(C), int(OC), F(1), d, int(OC), weight.data<F>(), int(C),
                   init == GradInit::kOverwrite ? F(0) : F(1), dinp.data<F>(), int(C));
    if (dweight.defined())
      detail::gemm(true, false, int(OC), int(C), int(N), F(1), d, int(OC), inp.data<F>(), int(C), F(1),
                   dweight.data<F>(), int(C));
    if (dbias.defined()) {
      F* db = dbias.data<F>();
      for (int64_t r = 0; r < N; ++r)
        for (int64_t j = 0; j < OC; ++j) db[j] += d[r * OC + j];
    }
    return Status();
  });
}

Status linear_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("linear_gelu_forward", "inp", inp, 1));
  ZW_TRY(c.rank("weight", weight, c.dtype(), 2));
  const int64_t N = inp.shape.rows(), C = inp.shape.last(), OC = weight.shape[0];
  ZW_TRY(c.value("weight", weight, Shape{OC, C}));
  ZW_TRY(c.check("bias", bias, c.dtype(), Shape{OC}, true));
  ZW_TRY(c.value("pre", pre, with_last(inp.shape, OC)));
  ZW_TRY(c.value("out", out, pre.shape));
  ZW_TRY(check_dims(c.op(), N, C, OC));
  if (ranges_overlap(out.mem.ptr, out.bytes(), pre.mem.ptr, pre.bytes()))
    return c.error("out overlaps pre; both are kept (pre for backward), pass separate buffers");
  if (c.cuda()) return cuda::linear_gelu_forward(out, pre, inp, weight, bias);
  ZW_TRY(linear_forward(pre, inp, weight, bias));
  return gelu_forward(out, pre);
}

Status linear_backward_gelu(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& weight, const Tensor& pre) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("linear_backward_gelu", "inp", inp, 1));
  ZW_TRY(c.rank("weight", weight, c.dtype(), 2));
  const int64_t N = inp.shape.rows(), C = inp.shape.last(), OC = weight.shape[0];
  ZW_TRY(c.value("weight", weight, Shape{OC, C}));
  ZW_TRY(c.value("pre", pre, inp.shape));
  ZW_TRY(c.value("dout", dout, with_last(inp.shape, OC)));
  ZW_TRY(c.grad("dpre", dpre, inp.shape));
  ZW_TRY(c.param_grad("dweight", dweight, weight.shape));
  ZW_TRY(c.param_grad("dbias", dbias, Shape{OC}));
  ZW_TRY(check_dims(c.op(), N, C, OC));
  if (dpre.defined() && ranges_overlap(dpre.mem.ptr, dpre.bytes(), dout.mem.ptr, dout.bytes()))
    return c.error("dpre overlaps dout; pass a separate gradient buffer");
  if (N == 0) return Status();
  if (c.cuda()) return cuda::linear_backward_gelu(dpre, dweight, dbias, dout, inp, weight, pre);
  ZW_TRY(linear_backward(dpre, dweight, dbias, dout, inp, weight, GradInit::kOverwrite));
  return dpre.defined() ? detail::gelu_backward_in_place(dpre, pre) : Status();
}

}  // namespace zw::tensor
