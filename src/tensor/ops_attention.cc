// tensor/ops_attention.cc — causal multi-head self-attention with softmax, forward and backward.
//
// Per batch b and head h (hs = C / NH; Q, K, V are the T×hs views of qkv [B,T,3C] at channel offsets 0, C, 2C plus
// h·hs, row stride 3C), with P = att[b,h] (T×T, zero above the diagonal):
//   forward   P = causal_softmax(Q·Kᵀ / sqrt(hs));  O = P·V
//   backward  dP = dO·Vᵀ,  dV += Pᵀ·dO,  dS = P ∘ (dP - rowsum(P ∘ dP)) / sqrt(hs),  dQ += dS·K,  dK += dSᵀ·Q
// Every product is a gemm on strided views. Rows go in blocks of kBlock queries: a block of rows [r0, r1) only
// needs keys [0, r1), so most of the upper triangle is never computed. Only the probabilities are saved; scratch
// ([T, T]) holds dP / dS for one (b, h). `out` is not needed here (the CUDA path's flash backward uses it).
// The CUDA path (cuda/attention.cu) is flash attention and saves only each row's log-sum-exp.
// Non-goals: flash-style online softmax on the CPU, dropout, masks other than causal, KV caches.
#include <algorithm>
#include <cmath>
#include <string>

#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda_context.h"
#include "tensor/ops.h"
#include "tensor/ops_internal.h"

namespace zw::tensor {

Shape attention_stats_shape(MemKind device, int64_t batch, int64_t seq, int num_heads) {
  if (device == MemKind::kCudaDevice) return Shape{batch, num_heads, seq};
  return Shape{batch, num_heads, seq, seq};
}
Status attention_prepare(MemKind device, DataType dtype, int64_t batch, int64_t seq, int num_heads, int64_t channels) {
  if (device != MemKind::kCudaDevice) return Status();
  if (current_cuda_context() == nullptr)
    return Status(Code::kInvalidArgument,
                  "attention_prepare: no current CUDA context (make one current with CudaScope)");
  if (batch < 1 || seq < 1 || num_heads < 1 || channels % num_heads != 0)
    return Status(Code::kInvalidArgument, "attention_prepare: batch " + std::to_string(batch) + ", seq " +
                                              std::to_string(seq) + " and " + std::to_string(channels) +
                                              " channels in " + std::to_string(num_heads) + " heads");
  return cuda::attention_prepare(dtype, batch, seq, num_heads, channels);
}

Shape attention_scratch_shape(MemKind device, int64_t batch, int64_t seq, int num_heads) {
  if (device == MemKind::kCudaDevice) return Shape{batch, num_heads, seq};
  return Shape{seq, seq};
}

namespace {

constexpr int64_t kBlock = 64;  // query rows per gemm block

// Softmax over row[0, n), in place.
void softmax_row(float* row, int64_t n) { detail::softmax_row_f32(row, n); }
void softmax_row(double* row, int64_t n) {
  double m = -INFINITY, sum = 0;
  for (int64_t u = 0; u < n; ++u) m = std::max(m, row[u]);
  for (int64_t u = 0; u < n; ++u) sum += (row[u] = std::exp(row[u] - m));
  for (int64_t u = 0; u < n; ++u) row[u] /= sum;
}

// d[u] = p[u]·(d[u] - Σ_w p[w]·d[w])·scale over [0, n).
void softmax_backward_row(float* d, const float* p, int64_t n, float scale) {
  detail::softmax_backward_row_f32(d, p, n, scale);
}
void softmax_backward_row(double* d, const double* p, int64_t n, double scale) {
  double dot = 0;
  for (int64_t u = 0; u < n; ++u) dot += p[u] * d[u];
  for (int64_t u = 0; u < n; ++u) d[u] = p[u] * (d[u] - dot) * scale;
}

// One (b, h): q/k/v point at row 0 of the head (row stride ld = 3C); out at row 0 (stride C); P is T×T.
template <typename F>
void attention_forward_head(F* out, F* P, const F* q, const F* k, const F* v, int64_t T, int64_t C, int64_t hs) {
  const int64_t ld = 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
    const int64_t r1 = std::min(T, r0 + kBlock), m = r1 - r0;
    F* Pb = P + r0 * T;
    detail::gemm(false, true, int(m), int(r1), int(hs), scale, q + r0 * ld, int(ld), k, int(ld), F(0), Pb, int(T));
    for (int64_t t = r0; t < r1; ++t) {
      F* row = P + t * T;
      softmax_row(row, t + 1);
      std::fill(row + t + 1, row + T, F(0));
    }
    detail::gemm(false, false, int(m), int(hs), int(r1), F(1), Pb, int(T), v, int(ld), F(0), out + r0 * C, int(C));
  }
}

// One (b, h) of backward: dq/dk/dv/q/k/v at row 0 of the head (stride 3C), dO at row 0 (stride C), D scratch T×T.
template <typename F>
void attention_backward_head(F* dq, F* dk, F* dv, F* D, const F* dO, const F* P, const F* q, const F* k, const F* v,
                             int64_t T, int64_t C, int64_t hs) {
  const int ld = int(3 * C);
  const F scale = F(1) / std::sqrt(F(hs));
  for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
    const int64_t r1 = std::min(T, r0 + kBlock), m = r1 - r0;
    const F* Pb = P + r0 * T;
    F* Db = D + r0 * T;
    const F* dOb = dO + r0 * C;
    detail::gemm(false, true, int(m), int(r1), int(hs), F(1), dOb, int(C), v, ld, F(0), Db, int(T));
    detail::gemm(true, false, int(r1), int(hs), int(m), F(1), Pb, int(T), dOb, int(C), F(1), dv, ld);
    for (int64_t t = r0; t < r1; ++t) {
      F* row = D + t * T;
      softmax_backward_row(row, P + t * T, t + 1, scale);
      std::fill(row + t + 1, row + r1, F(0));
    }
    detail::gemm(false, false, int(m), int(hs), int(r1), F(1), Db, int(T), k, ld, F(1), dq + r0 * ld, ld);
    detail::gemm(true, false, int(r1), int(hs), int(m), F(1), Db, int(T), q + r0 * ld, ld, F(1), dk, ld);
  }
}

// qkv [B,T,3C] split into num_heads heads, and stats of its device's shape.
Status check_common(const detail::Checker& c, const Tensor& qkv, const Tensor& stats, int num_heads, int64_t* B,
                    int64_t* T, int64_t* C) {
  *B = qkv.shape[0];
  *T = qkv.shape[1];
  *C = qkv.shape[2] / 3;
  if (qkv.shape[2] % 3 != 0 || num_heads <= 0 || *C % num_heads != 0)
    return c.error("qkv " + qkv.shape.to_string() + " does not split into q, k, v of " + std::to_string(num_heads) +
                   " heads");
  const MemKind kind = c.cuda() ? MemKind::kCudaDevice : MemKind::kHost;
  return c.stats("stats", stats, attention_stats_shape(kind, *B, *T, num_heads));
}

}  // namespace

Status attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv, int num_heads) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("attention_forward", "qkv", qkv, 3));
  int64_t B, T, C;
  ZW_TRY(check_common(c, qkv, att, num_heads, &B, &T, &C));
  ZW_TRY(c.value("out", out, Shape{B, T, C}));
  if (c.cuda()) return cuda::attention_forward(out, att, qkv, num_heads);
  const int64_t NH = num_heads, hs = C / NH;
  return detail::dispatch_float(c.op(), qkv.dtype, [&](auto tag) {
    using F = decltype(tag);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h) {
        const F* q = qkv.data<F>() + b * T * 3 * C + h * hs;
        attention_forward_head(out.data<F>() + b * T * C + h * hs, att.data<F>() + (b * NH + h) * T * T, q, q + C,
                               q + 2 * C, T, C, hs);
      }
    return Status();
  });
}

Status attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout, const Tensor& out,
                          const Tensor& qkv, const Tensor& att, int num_heads, GradInit init) {
  ZW_ASSIGN_OR_RETURN(const detail::Checker c, detail::Checker::make("attention_backward", "qkv", qkv, 3));
  int64_t B, T, C;
  ZW_TRY(check_common(c, qkv, att, num_heads, &B, &T, &C));
  const MemKind kind = c.cuda() ? MemKind::kCudaDevice : MemKind::kHost;
  ZW_TRY(c.value("dout", dout, Shape{B, T, C}));
  ZW_TRY(c.value("out", out, Shape{B, T, C}));
  ZW_TRY(c.stats("scratch", scratch, attention_scratch_shape(kind, B, T, num_heads)));
  ZW_TRY(c.grad("dqkv", dqkv, qkv.shape));
  if (!dqkv.defined()) return Status();
  if (c.cuda()) return cuda::attention_backward(dqkv, scratch, dout, out, qkv, att, num_heads, init);
  detail::zero_for_overwrite(dqkv, init);
  const int64_t NH = num_heads, hs = C / NH;
  return detail::dispatch_float(c.op(), qkv.dtype, [&](auto tag) {
    using F = decltype(tag);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h) {
        const int64_t off = b * T * 3 * C + h * hs;
        const F* q = qkv.data<F>() + off;
        F* dq = dqkv.data<F>() + off;
        attention_backward_head(dq, dq + C, dq + 2 * C, scratch.data<F>(), dout.data<F>() + b * T * C + h * hs,
                                att.data<F>() + (b * NH + h) * T * T, q, q + C, q + 2 * C, T, C, hs);
      }
    return Status();
  });
}

}  // namespace zw::tensor
