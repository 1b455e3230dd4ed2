// tensor/ops_basic.cc — argument checks and the simple ops: token+position embedding, GELU, residual add.
//
// Each public op checks its arguments once (detail::Checker) and then runs the CPU loops here or the CUDA
// implementation (cuda/cuda_ops.h). GELU in f32 runs the vectorized kernels of ops_vec.cc; f64 (gradient checks)
// keeps the reference loops. Non-goals: vectorization beyond what the compiler does for the other ops.
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda_context.h"
#include "tensor/ops.h"
#include "tensor/ops_internal.h"

namespace zw::tensor {
namespace detail {

Result<Checker> Checker::make(const char* op, const char* name, const Tensor& primary, int min_rank) {
  if (!primary.defined() && primary.numel() != 0)
    return Status(Code::kInvalidArgument, std::string(op) + ": " + name + " is undefined");
  const MemKind kind = primary.mem.kind;
  const DataType d = primary.dtype;
  if (kind == MemKind::kHost) {
    if (d != DataType::kFloat32 && d != DataType::kFloat64)
      return Status(Code::kUnsupported, std::string(op) + ": " + name + " is " + primary.describe() +
                                            "; the CPU path computes in f32 or f64 (convert f16/bf16 first)");
  } else {
    if (d != DataType::kFloat32 && d != DataType::kBFloat16 && d != DataType::kFloat16)
      return Status(Code::kUnsupported, std::string(op) + ": " + name + " is " + primary.describe() +
                                            "; the CUDA path computes on f32, bf16 or f16 values");
    ZW_TRY(require_cuda_context(std::string(op) + ": " + name, primary.mem.device));
  }
  Checker c(op, kind, primary.mem.device, d);
  ZW_TRY(c.rank(name, primary, d, min_rank));
  return c;
}

Status Checker::device_of(const char* name, const Tensor& t) const {
  if (t.mem.kind == kind_ && (kind_ == MemKind::kHost || t.mem.device == device_)) return Status();
  return error(std::string(name) + " is " + t.describe() + (t.mem.kind == MemKind::kCudaDevice
                                                                 ? " (device " + std::to_string(t.mem.device) + ")"
                                                                 : std::string()) +
               " but this call runs on " + (cuda() ? "CUDA device " + std::to_string(device_) : std::string("the host")) +
               "; every tensor of one call must live on one device");
}

Status Checker::rank(const char* name, const Tensor& t, DataType dtype, int min_rank) const {
  if (!t.defined() && t.numel() != 0) return error(std::string(name) + " is undefined");
  ZW_TRY(device_of(name, t));
  if (t.dtype != dtype) return error(std::string(name) + " is " + t.describe() + ", expected dtype " + dtype_name(dtype));
  if (t.shape.rank < min_rank || t.numel() < 0)
    return error(std::string(name) + " has shape " + t.shape.to_string() + ", expected at least " +
                 std::to_string(min_rank) + " dims");
  return Status();
}

Status Checker::check(const char* name, const Tensor& t, DataType dtype, const Shape& shape, bool optional) const {
  if (optional && !t.defined()) return Status();
  ZW_TRY(rank(name, t, dtype, 0));
  if (!(t.shape == shape))
    return error(std::string(name) + " has shape " + t.shape.to_string() + ", expected " + shape.to_string());
  return Status();
}

void zero_for_overwrite(const Tensor& grad, GradInit init) {
  if (init == GradInit::kOverwrite && grad.defined() && grad.on_host()) std::memset(grad.mem.ptr, 0, grad.bytes());
}

}  // namespace detail

using detail::Checker;

Status embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  ZW_ASSIGN_OR_RETURN(const Checker c, Checker::make("embedding_forward", "wte", wte, 2));
  ZW_TRY(c.rank("tokens", tokens, DataType::kInt32, 2));
  const int64_t B = tokens.shape[0], T = tokens.shape[1], V = wte.shape[0], C = wte.shape[1];
  ZW_TRY(c.value("out", out, Shape{B, T, C}));
  ZW_TRY(c.rank("wpe", wpe, c.dtype(), 2));
  if (wpe.shape[0] < T || wpe.shape[1] != C)
    return c.error("wpe " + wpe.shape.to_string() + " cannot serve T=" + std::to_string(T) + ", C=" + std::to_string(C));
  if (c.cuda()) return cuda::embedding_forward(out, tokens, wte, wpe);
  const int32_t* tok = tokens.data<int32_t>();
  for (int64_t i = 0; i < B * T; ++i)
    if (tok[i] < 0 || tok[i] >= V)
      return c.error("token " + std::to_string(tok[i]) + " at position " + std::to_string(i) +
                     " is outside the vocabulary [0, " + std::to_string(V) + ")");
  return detail::dispatch_float(c.op(), wte.dtype, [&](auto tag) {
    using F = decltype(tag);
    F* o = out.data<F>();
    const F* te = wte.data<F>();
    const F* pe = wpe.data<F>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        F* orow = o + (b * T + t) * C;
        const F* trow = te + tok[b * T + t] * C;
        const F* prow = pe + t * C;
        for (int64_t c = 0; c < C; ++c) orow[c] = trow[c] + prow[c];
      }
    return Status();
  });
}

Status embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  ZW_ASSIGN_OR_RETURN(const Checker c, Checker::make("embedding_backward", "dout", dout, 3));
  const int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  ZW_TRY(c.ids("tokens", tokens, Shape{B, T}));
  if (dwte.defined()) ZW_TRY(c.rank("dwte", dwte, c.param_grad_dtype(), 2));
  if (dwpe.defined()) ZW_TRY(c.rank("dwpe", dwpe, c.param_grad_dtype(), 2));
  if ((dwte.defined() && dwte.shape[1] != C) || (dwpe.defined() && (dwpe.shape[1] != C || dwpe.shape[0] < T)))
    return c.error("gradient shapes do not match dout " + dout.shape.to_string());
  if (c.cuda()) return cuda::embedding_backward(dwte, dwpe, dout, tokens);
  const int32_t* tok = tokens.data<int32_t>();
  const int64_t V = dwte.defined() ? dwte.shape[0] : 0;
  for (int64_t i = 0; dwte.defined() && i < B * T; ++i)
    if (tok[i] < 0 || tok[i] >= V)
      return c.error("token " + std::to_string(tok[i]) + " at position " + std::to_string(i) +
                     " is outside the vocabulary [0, " + std::to_string(V) + ")");
  return detail::dispatch_float(c.op(), dout.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* d = dout.data<F>();
    F* gte = dwte.data<F>();
    F* gpe = dwpe.data<F>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const F* drow = d + (b * T + t) * C;
        if (gte != nullptr) {
          F* row = gte + tok[b * T + t] * C;
          for (int64_t c = 0; c < C; ++c) row[c] += drow[c];
        }
        if (gpe != nullptr) {
          F* row = gpe + t * C;
          for (int64_t c = 0; c < C; ++c) row[c] += drow[c];
        }
      }
    return Status();
  });
}

namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;
}  // namespace

Status gelu_forward(const Tensor& out, const Tensor& inp) {
  ZW_ASSIGN_OR_RETURN(const Checker c, Checker::make("gelu_forward", "inp", inp, 0));
  ZW_TRY(c.value("out", out, inp.shape));
  if (c.cuda()) return cuda::gelu_forward(out, inp);
  return detail::dispatch_float(c.op(), inp.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* x = inp.data<F>();
    F* y = out.data<F>();
    const int64_t n = inp.numel();
    if constexpr (std::is_same_v<F, float>) {
      detail::gelu_forward_f32(y, x, n);
      return Status();
    }
    for (int64_t i = 0; i < n; ++i) {
      const F u = F(kGeluScale) * (x[i] + F(kGeluCubic) * x[i] * x[i] * x[i]);
      y[i] = F(0.5) * x[i] * (F(1) + std::tanh(u));
    }
    return Status();
  });
}

Status gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, GradInit init) {
  ZW_ASSIGN_OR_RETURN(const Checker c, Checker::make("gelu_backward", "inp", inp, 0));
  ZW_TRY(c.value("dout", dout, inp.shape));
  ZW_TRY(c.grad("dinp", dinp, inp.shape));
  if (!dinp.defined()) return Status();
  if (ranges_overlap(dinp.mem.ptr, dinp.bytes(), dout.mem.ptr, dout.bytes()))
    return c.error("dinp overlaps dout; pass a separate gradient buffer");
  if (c.cuda()) return cuda::gelu_backward(dinp, dout, inp, init);
  detail::zero_for_overwrite(dinp, init);
  return detail::dispatch_float(c.op(), inp.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* x = inp.data<F>();
    const F* dy = dout.data<F>();
    F* dx = dinp.data<F>();
    const int64_t n = inp.numel();
    if constexpr (std::is_same_v<F, float>) {
      detail::gelu_backward_f32(dx, dy, x, n);
      return Status();
    }
    for (int64_t i = 0; i < n; ++i) {
      const F u = F(kGeluScale) * (x[i] + F(kGeluCubic) * x[i] * x[i] * x[i]);
      const F th = std::tanh(u);
      const F du = F(kGeluScale) * (F(1) + F(3 * kGeluCubic) * x[i] * x[i]);
      dx[i] += dy[i] * (F(0.5) * (F(1) + th) + F(0.5) * x[i] * (F(1) - th * th) * du);
    }
    return Status();
  });
}

namespace detail {

// d = d · gelu'(x) on the CPU, with gelu_backward's arithmetic (so d·gelu'(x) has the bits of a gelu_backward into a
// zeroed gradient); d and x are f32 or f64 host tensors of one shape (checked by the caller).
Status gelu_backward_in_place(const Tensor& d, const Tensor& x) {
  return dispatch_float("gelu_backward_in_place", x.dtype, [&](auto tag) {
    using F = decltype(tag);
    F* g = d.data<F>();
    const F* v = x.data<F>();
    const int64_t n = x.numel();
    if constexpr (std::is_same_v<F, float>) {
      gelu_backward_in_place_f32(g, v, n);
      return Status();
    }
    for (int64_t i = 0; i < n; ++i) {
      const F u = F(kGeluScale) * (v[i] + F(kGeluCubic) * v[i] * v[i] * v[i]);
      const F th = std::tanh(u);
      const F du = F(kGeluScale) * (F(1) + F(3 * kGeluCubic) * v[i] * v[i]);
      g[i] = g[i] * (F(0.5) * (F(1) + th) + F(0.5) * v[i] * (F(1) - th * th) * du);
    }
    return Status();
  });
}

}  // namespace detail

Status residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  ZW_ASSIGN_OR_RETURN(const Checker c, Checker::make("residual_forward", "a", a, 0));
  ZW_TRY(c.value("b", b, a.shape));
  ZW_TRY(c.value("out", out, a.shape));
  if (c.cuda()) return cuda::residual_forward(out, a, b);
  return detail::dispatch_float(c.op(), a.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* x = a.data<F>();
    const F* y = b.data<F>();
    F* o = out.data<F>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) o[i] = x[i] + y[i];
    return Status();
  });
}

Status residual_backward(const Tensor& da, const Tensor& db, const Tensor& dout, GradInit init) {
  ZW_ASSIGN_OR_RETURN(const Checker c, Checker::make("residual_backward", "dout", dout, 0));
  ZW_TRY(c.grad("da", da, dout.shape));
  ZW_TRY(c.grad("db", db, dout.shape));
  // A gradient that is dout's own memory already holds dout's contribution (the shared residual-stream gradient).
  auto separate = [&](const char* name, const Tensor& g) -> Result<Tensor> {
    if (!g.defined() || g.mem.ptr == dout.mem.ptr) return Tensor{};
    if (ranges_overlap(g.mem.ptr, g.bytes(), dout.mem.ptr, dout.bytes()))
      return c.error(std::string(name) + " partly overlaps dout; pass dout's own memory or a separate buffer");
    return g;
  };
  ZW_ASSIGN_OR_RETURN(const Tensor ga, separate("da", da));
  ZW_ASSIGN_OR_RETURN(const Tensor gb, separate("db", db));
  if (ga.defined() && gb.defined() && ranges_overlap(ga.mem.ptr, ga.bytes(), gb.mem.ptr, gb.bytes()))
    return c.error("da and db overlap");
  if (c.cuda()) return cuda::residual_backward(ga, gb, dout, init);
  detail::zero_for_overwrite(ga, init);
  detail::zero_for_overwrite(gb, init);
  return detail::dispatch_float(c.op(), dout.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* d = dout.data<F>();
    const int64_t n = dout.numel();
    for (F* g : {ga.data<F>(), gb.data<F>()}) {
      if (g == nullptr) continue;
      for (int64_t i = 0; i < n; ++i) g[i] += d[i];
    }
    return Status();
  });
}

}  // namespace zw::tensor
