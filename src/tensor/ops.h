// tensor/ops.h — the GPT-2 operators as forward/backward pairs on Tensors (CPU reference path).
//
// Contract shared by every op:
//  - No op allocates. Outputs, saved tensors and scratch are passed in, sized by the caller (the *_shape helpers
//    below say how big).
//  - Forward overwrites its outputs. Backward ACCUMULATES (+=) into every gradient it is given, so a tensor used
//    twice (tied embeddings, a residual stream) collects both contributions; zero gradients before a step. An
//    undefined gradient Tensor is skipped.
//  - Compute dtype: f32 (the training path) or f64 (used by the finite-difference gradient checks); every tensor
//    of one call has the same dtype (token/target ids are i32). f16/bf16 parameters are stored, not computed on:
//    convert() them into an f32 buffer first (the ZeRO engine does so when it gathers a unit).
//  - Host tensors only for now; a CUDA path will sit behind the same functions (kUnsupported until then).
//  - Shapes are checked and a mismatch returns kInvalidArgument naming the op and tensor; token ids out of range
//    are reported by forward. Threading: none inside, except what OpenBLAS does in gemm.
// Notation: B batch, T time, C channels, NH heads (C % NH == 0), V vocabulary, OC output channels; "[..., C]"
// means any leading dims flattened to rows.
// Non-goals: broadcasting, dropout, mixed-precision compute, fused kernels beyond the fused cross-entropy.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].  tokens i32 [B,T], wte [V,C], wpe [maxT,C] with maxT >= T,
// out [B,T,C].
Status embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
Status embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens);

// out = (inp - mean) * rstd * weight + bias over the last dim (eps 1e-5, biased variance, as PyTorch).
// inp/out [..., C]; mean/rstd [rows] are saved for backward; weight/bias [C].
inline constexpr double kLayerNormEps = 1e-5;
Status layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias);
Status layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd);
Shape layernorm_stats_shape(const Shape& inp);  // [rows]

// out = inp · weightᵀ + bias, via cblas gemm. inp [..., C], weight [OC, C], bias [OC] or undefined,
// out [..., OC].
Status linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias);
Status linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight);

// GELU, tanh approximation (GPT-2; PyTorch gelu(approximate="tanh")). out and inp have the same shape.
Status gelu_forward(const Tensor& out, const Tensor& inp);
Status gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp);

// out = a + b (same shapes).
Status residual_forward(const Tensor& out, const Tensor& a, const Tensor& b);
Status residual_backward(const Tensor& da, const Tensor& db, const Tensor& dout);

// Causal multi-head self-attention. qkv [B,T,3C] holds q | k | v (each C = NH heads × hs channels, head-major),
// out [B,T,C]. att [B,NH,T,T] receives the softmax probabilities (zero above the diagonal) and is what backward
// needs besides qkv. scratch holds attention_scratch_shape(T) elements. Scale 1/sqrt(hs).
Status attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv, int num_heads);
Status attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout, const Tensor& qkv,
                          const Tensor& att);
Shape attention_probs_shape(int64_t batch, int64_t seq, int num_heads);  // [B, NH, T, T]
Shape attention_scratch_shape(int64_t seq);                              // [T, T]

// Fused softmax + cross-entropy over the last dim. logits/probs [..., V], targets i32 [rows-shape], losses
// [rows-shape] (per-position -log p[target]); *mean_loss = mean of losses. Backward adds
// dloss_per_position * (probs - onehot(target)) into dlogits; for the mean loss dloss_per_position = 1/rows.
Status cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets,
                             double* mean_loss);
Status cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              double dloss_per_position);

}  // namespace zw::tensor
