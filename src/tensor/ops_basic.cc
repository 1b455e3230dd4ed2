// tensor/ops_basic.cc — argument checks and the simple ops: token+position embedding, GELU, residual add.
//
// GELU in f32 runs the vectorized kernels of ops_vec.cc; f64 (gradient checks) keeps the reference loops.
// Non-goals: vectorization beyond what the compiler does for the other ops.
#include <cmath>
#include <string>
#include <type_traits>

#include "tensor/ops.h"
#include "tensor/ops_internal.h"

namespace zw::tensor {
namespace detail {

Status check_rank(const char* op, const char* name, const Tensor& t, DataType dtype, int min_rank) {
  if (!t.defined() && t.numel() != 0)
    return Status(Code::kInvalidArgument, std::string(op) + ": " + name + " is undefined");
  if (t.dtype != dtype)
    return Status(Code::kInvalidArgument,
                  std::string(op) + ": " + name + " is " + t.describe() + ", expected dtype " + dtype_name(dtype));
  if (!t.on_host())
    return Status(Code::kUnsupported, std::string(op) + ": " + name + " lives on " + mem_kind_name(t.mem.kind) +
                                          "; only the CPU path exists so far");
  if (t.shape.rank < min_rank || t.numel() < 0)
    return Status(Code::kInvalidArgument, std::string(op) + ": " + name + " has shape " + t.shape.to_string() +
                                              ", expected at least " + std::to_string(min_rank) + " dims");
  return Status();
}

Status check(const char* op, const char* name, const Tensor& t, DataType dtype, const Shape& shape) {
  ZW_TRY(check_rank(op, name, t, dtype, 0));
  if (!(t.shape == shape))
    return Status(Code::kInvalidArgument, std::string(op) + ": " + name + " has shape " + t.shape.to_string() +
                                              ", expected " + shape.to_string());
  return Status();
}

Status check_optional(const char* op, const char* name, const Tensor& t, DataType dtype, const Shape& shape) {
  if (!t.defined()) return Status();
  return check(op, name, t, dtype, shape);
}

}  // namespace detail

using detail::check;
using detail::check_optional;
using detail::check_rank;

Status embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const char* op = "embedding_forward";
  ZW_TRY(check_rank(op, "tokens", tokens, DataType::kInt32, 2));
  ZW_TRY(check_rank(op, "wte", wte, wte.dtype, 2));
  const int64_t B = tokens.shape[0], T = tokens.shape[1], V = wte.shape[0], C = wte.shape[1];
  ZW_TRY(check(op, "out", out, wte.dtype, Shape{B, T, C}));
  ZW_TRY(check_rank(op, "wpe", wpe, wte.dtype, 2));
  if (wpe.shape[0] < T || wpe.shape[1] != C)
    return Status(Code::kInvalidArgument, std::string(op) + ": wpe " + wpe.shape.to_string() +
                                              " cannot serve T=" + std::to_string(T) + ", C=" + std::to_string(C));
  const int32_t* tok = tokens.data<int32_t>();
  for (int64_t i = 0; i < B * T; ++i)
    if (tok[i] < 0 || tok[i] >= V)
      return Status(Code::kInvalidArgument, std::string(op) + ": token " + std::to_string(tok[i]) + " at position " +
                                                std::to_string(i) + " is outside the vocabulary [0, " +
                                                std::to_string(V) + ")");
  return detail::dispatch_float(op, wte.dtype, [&](auto tag) {
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
  const char* op = "embedding_backward";
  ZW_TRY(check_rank(op, "dout", dout, dout.dtype, 3));
  const int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  ZW_TRY(check(op, "tokens", tokens, DataType::kInt32, Shape{B, T}));
  if (dwte.defined()) ZW_TRY(check_rank(op, "dwte", dwte, dout.dtype, 2));
  if (dwpe.defined()) ZW_TRY(check_rank(op, "dwpe", dwpe, dout.dtype, 2));
  if ((dwte.defined() && dwte.shape[1] != C) || (dwpe.defined() && (dwpe.shape[1] != C || dwpe.shape[0] < T)))
    return Status(Code::kInvalidArgument,
                  std::string(op) + ": gradient shapes do not match dout " + dout.shape.to_string());
  const int32_t* tok = tokens.data<int32_t>();
  return detail::dispatch_float(op, dout.dtype, [&](auto tag) {
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
  ZW_TRY(check_rank("gelu_forward", "inp", inp, inp.dtype, 0));
  ZW_TRY(check("gelu_forward", "out", out, inp.dtype, inp.shape));
  return detail::dispatch_float("gelu_forward", inp.dtype, [&](auto tag) {
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

Status gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  ZW_TRY(check_rank("gelu_backward", "inp", inp, inp.dtype, 0));
  ZW_TRY(check("gelu_backward", "dout", dout, inp.dtype, inp.shape));
  ZW_TRY(check_optional("gelu_backward", "dinp", dinp, inp.dtype, inp.shape));
  if (!dinp.defined()) return Status();
  return detail::dispatch_float("gelu_backward", inp.dtype, [&](auto tag) {
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

Status residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  ZW_TRY(check_rank("residual_forward", "a", a, a.dtype, 0));
  ZW_TRY(check("residual_forward", "b", b, a.dtype, a.shape));
  ZW_TRY(check("residual_forward", "out", out, a.dtype, a.shape));
  return detail::dispatch_float("residual_forward", a.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* x = a.data<F>();
    const F* y = b.data<F>();
    F* o = out.data<F>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) o[i] = x[i] + y[i];
    return Status();
  });
}

Status residual_backward(const Tensor& da, const Tensor& db, const Tensor& dout) {
  ZW_TRY(check_rank("residual_backward", "dout", dout, dout.dtype, 0));
  ZW_TRY(check_optional("residual_backward", "da", da, dout.dtype, dout.shape));
  ZW_TRY(check_optional("residual_backward", "db", db, dout.dtype, dout.shape));
  return detail::dispatch_float("residual_backward", dout.dtype, [&](auto tag) {
    using F = decltype(tag);
    const F* d = dout.data<F>();
    const int64_t n = dout.numel();
    for (F* g : {da.data<F>(), db.data<F>()}) {
      if (g == nullptr) continue;
      for (int64_t i = 0; i < n; ++i) g[i] += d[i];
    }
    return Status();
  });
}

}  // namespace zw::tensor
