// tensor/ops_attention.cc — causal multi-head self-attention with softmax, forward and backward.
//
// Per batch b, head h, query position t (hs = C / NH, q/k/v rows taken from qkv [B,T,3C] at channel offsets
// 0, C, 2C plus h·hs):
//   forward   s[u] = q_t·k_u / sqrt(hs) for u <= t;  att[t,u] = softmax_u(s);  out_t = Σ_u att[t,u]·v_u
//   backward  datt[u] = dout_t·v_u,  dv_u += att[t,u]·dout_t,
//             ds[u] = att[t,u]·(datt[u] - Σ_w att[t,w]·datt[w]),  dq_t += Σ_u ds[u]·k_u/sqrt(hs),
//             dk_u += ds[u]·q_t/sqrt(hs)
// Only the probabilities are saved; the pre-softmax scores are not needed by backward. scratch holds datt for one
// row. Non-goals: flash-style tiling, dropout, masks other than causal, KV caches.
#include <cmath>
#include <string>

#include "tensor/ops.h"
#include "tensor/ops_internal.h"

namespace zw::tensor {

Shape attention_probs_shape(int64_t batch, int64_t seq, int num_heads) { return Shape{batch, num_heads, seq, seq}; }
Shape attention_scratch_shape(int64_t seq) { return Shape{seq}; }

namespace {

template <typename F>
void attention_forward_row(F* out, F* att, const F* qkv, int64_t t, int64_t C, int64_t hs) {
  const F* q = qkv + t * 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  F maxv = -INFINITY;
  for (int64_t u = 0; u <= t; ++u) {
    const F* k = qkv + u * 3 * C + C;
    F s = 0;
    for (int64_t i = 0; i < hs; ++i) s += q[i] * k[i];
    att[u] = s * scale;
    if (att[u] > maxv) maxv = att[u];
  }
  F sum = 0;
  for (int64_t u = 0; u <= t; ++u) {
    att[u] = std::exp(att[u] - maxv);
    sum += att[u];
  }
  const F inv = F(1) / sum;
  for (int64_t u = 0; u <= t; ++u) att[u] *= inv;
  for (int64_t u = 0; u <= t; ++u) {
    const F* v = qkv + u * 3 * C + 2 * C;
    for (int64_t i = 0; i < hs; ++i) out[i] = (u == 0 ? F(0) : out[i]) + att[u] * v[i];
  }
}

template <typename F>
void attention_backward_row(F* dqkv, F* datt, const F* dout, const F* att, const F* qkv, int64_t t, int64_t C,
                            int64_t hs) {
  const F scale = F(1) / std::sqrt(F(hs));
  F dot = 0;
  for (int64_t u = 0; u <= t; ++u) {
    const F* v = qkv + u * 3 * C + 2 * C;
    F* dv = dqkv + u * 3 * C + 2 * C;
    F s = 0;
    for (int64_t i = 0; i < hs; ++i) {
      s += dout[i] * v[i];
      dv[i] += att[u] * dout[i];
    }
    datt[u] = s;
    dot += att[u] * s;
  }
  const F* q = qkv + t * 3 * C;
  F* dq = dqkv + t * 3 * C;
  for (int64_t u = 0; u <= t; ++u) {
    const F ds = att[u] * (datt[u] - dot) * scale;
    const F* k = qkv + u * 3 * C + C;
    F* dk = dqkv + u * 3 * C + C;
    for (int64_t i = 0; i < hs; ++i) {
      dq[i] += ds * k[i];
      dk[i] += ds * q[i];
    }
  }
}

Status check_common(const char* op, const Tensor& qkv, const Tensor& att, int64_t* B, int64_t* T, int64_t* C,
                    int64_t* NH) {
  ZW_TRY(detail::check_rank(op, "qkv", qkv, qkv.dtype, 3));
  ZW_TRY(detail::check_rank(op, "att", att, qkv.dtype, 4));
  *B = qkv.shape[0];
  *T = qkv.shape[1];
  *C = qkv.shape[2] / 3;
  *NH = att.shape[1];
  if (qkv.shape[2] % 3 != 0 || *NH <= 0 || *C % *NH != 0)
    return Status(Code::kInvalidArgument, std::string(op) + ": qkv " + qkv.shape.to_string() + " and att " +
                                              att.shape.to_string() + " do not split into heads");
  return detail::check(op, "att", att, qkv.dtype, attention_probs_shape(*B, *T, int(*NH)));
}

}  // namespace

Status attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv, int num_heads) {
  const char* op = "attention_forward";
  ZW_TRY(detail::check_rank(op, "att", att, qkv.dtype, 4));
  if (att.shape[1] != num_heads)
    return Status(Code::kInvalidArgument, std::string(op) + ": att " + att.shape.to_string() + " is not for " +
                                              std::to_string(num_heads) + " heads");
  int64_t B, T, C, NH;
  ZW_TRY(check_common(op, qkv, att, &B, &T, &C, &NH));
  ZW_TRY(detail::check(op, "out", out, qkv.dtype, Shape{B, T, C}));
  const int64_t hs = C / NH;
  return detail::dispatch_float(op, qkv.dtype, [&](auto tag) {
    using F = decltype(tag);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t t = 0; t < T; ++t) {
          F* arow = att.data<F>() + ((b * NH + h) * T + t) * T;
          for (int64_t u = t + 1; u < T; ++u) arow[u] = 0;
          attention_forward_row(out.data<F>() + (b * T + t) * C + h * hs, arow, qkv.data<F>() + b * T * 3 * C + h * hs,
                                t, C, hs);
        }
    return Status();
  });
}

Status attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout, const Tensor& qkv,
                          const Tensor& att) {
  const char* op = "attention_backward";
  int64_t B, T, C, NH;
  ZW_TRY(check_common(op, qkv, att, &B, &T, &C, &NH));
  ZW_TRY(detail::check(op, "dout", dout, qkv.dtype, Shape{B, T, C}));
  ZW_TRY(detail::check(op, "scratch", scratch, qkv.dtype, attention_scratch_shape(T)));
  ZW_TRY(detail::check_optional(op, "dqkv", dqkv, qkv.dtype, qkv.shape));
  if (!dqkv.defined()) return Status();
  const int64_t hs = C / NH;
  return detail::dispatch_float(op, qkv.dtype, [&](auto tag) {
    using F = decltype(tag);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t off = b * T * 3 * C + h * hs;
          attention_backward_row(dqkv.data<F>() + off, scratch.data<F>(), dout.data<F>() + (b * T + t) * C + h * hs,
                                 att.data<F>() + ((b * NH + h) * T + t) * T, qkv.data<F>() + off, t, C, hs);
        }
    return Status();
  });
}

}  // namespace zw::tensor
