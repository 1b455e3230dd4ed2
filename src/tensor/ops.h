// tensor/ops.h — the GPT-2 operators as forward/backward pairs on Tensors, on the CPU or on a CUDA device.
//
// Contract shared by every op:
//  - No op allocates. Outputs, saved tensors and scratch are passed in, sized by the caller (the *_shape helpers
//    below say how big); a CUDA op may also use the current CudaContext's scratch and cuBLASLt workspace, which
//    were allocated when the context was made.
//  - Forward overwrites its outputs. Backward ACCUMULATES (+=) into every gradient it is given, so a tensor used
//    twice (tied embeddings, a residual stream) collects both contributions; zero gradients before a step. The
//    one exception is the input gradient of an op called with GradInit::kOverwrite: it is then written as if it
//    had been zeroed first (the model uses that for an activation gradient whose first writer the op is, which
//    saves zeroing it). An undefined gradient Tensor is skipped.
//  - Device: every tensor of one call lives on the same device (all host, or all on one CUDA device); a mix is
//    kInvalidArgument naming the tensor. CUDA ops run asynchronously on the current CudaContext's stream
//    (cuda_context.h) and fail with kInvalidArgument when no context is current on the calling thread.
//  - Dtypes ("F" below). CPU: f32 (training) or f64 (the finite-difference gradient checks); every tensor of one
//    call has that dtype. CUDA: F is f32, bf16 or f16 for values and activation gradients; parameter gradients
//    (dweight, dbias, dwte, dwpe, layernorm dweight/dbias) are f32 and the statistics and scratch that forward
//    saves (layernorm mean/rstd, attention stats and scratch, losses) are f32 — mixed precision as the field does
//    it: 16-bit storage, f32 arithmetic and accumulation. Token and target ids are i32 on the same device.
//  - Shapes are checked and a mismatch returns kInvalidArgument naming the op and tensor. Token ids out of range
//    are reported by forward: on the CPU at once; on a CUDA device the kernel records the first one in the
//    context's error slot and CudaContext::synchronize() returns it (kInvalidArgument naming op, position, id).
//  - Aliasing: outputs never overlap inputs, except where an op says so (the residual stream's shared gradient,
//    the softmax written over its logits, the loss gradient written over its probabilities).
//  - Determinism: the same inputs give the same bits on every run (no atomics in floating point, fixed reduction
//    orders). Results differ between devices and dtypes by rounding only.
// Threading: none inside on the CPU, except what OpenBLAS does in gemm; CUDA ops are called from the thread whose
// context they use.
// Notation: B batch, T time, C channels, NH heads (C % NH == 0), V vocabulary, OC output channels; "[..., C]"
// means any leading dims flattened to rows.
// Non-goals: broadcasting, dropout, strided tensors, fused kernels beyond the ones declared here.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor {

// How backward treats the input gradient it is given (see the contract above).
enum class GradInit : uint8_t {
  kAccumulate,  // dinp += contribution
  kOverwrite,   // dinp = contribution
};

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].  tokens i32 [B,T], wte [V,C], wpe [maxT,C] with maxT >= T,
// out [B,T,C]. Backward adds each position's gradient into its token's wte row and its wpe row; on a CUDA device
// the positions are sorted by token first (in the context's scratch), so the sums are deterministic.
Status embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
Status embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens);

// out = (inp - mean) * rstd * weight + bias over the last dim (eps 1e-5, biased variance, as PyTorch).
// inp/out [..., C]; mean/rstd [rows] are saved for backward; weight/bias [C].
inline constexpr double kLayerNormEps = 1e-5;
Status layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias);
Status layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                          GradInit init = GradInit::kAccumulate);
Shape layernorm_stats_shape(const Shape& inp);  // [rows]

// Fused residual add and layernorm: res = a + b, then out = layernorm(res) as layernorm_forward (one pass over
// the bytes on a CUDA device). Its backward is layernorm_backward into dres followed by residual_backward.
Status residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias);

// out = inp · weightᵀ + bias: cblas gemm on the CPU, cuBLASLt on a CUDA device (bias in the epilogue).
// inp [..., C], weight [OC, C], bias [OC] or undefined, out [..., OC].
Status linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias);
Status linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight, GradInit init = GradInit::kAccumulate);

// A linear layer followed by GELU, and the linear layer that consumes it (the MLP of a transformer block):
//  - linear_gelu_forward: pre = inp · weightᵀ + bias, out = gelu(pre). CUDA: one cuBLASLt matmul with the GELU in its
//    epilogue (CUBLASLT_EPILOGUE_GELU_AUX_BIAS writes both; out is the GELU of the f32 sum, before rounding pre), or
//    linear_forward + gelu_forward where cuBLASLt offers no such epilogue for the shape. Backward of the pair:
//    linear_backward with dout = dpre.
//  - linear_backward_gelu: linear_backward of out2 = inp · weightᵀ + bias where inp = gelu(pre) (inp is that GELU,
//    possibly recomputed from pre), except that the input gradient is taken through the GELU: dpre = (dout ·
//    weight) ∘ gelu'(pre) is WRITTEN (CUDA: the matmul's CUBLASLT_EPILOGUE_DGELU epilogue, or a matmul and an in-place
//    GELU backward); dweight and dbias ACCUMULATE as in linear_backward. dpre must not overlap dout.
Status linear_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias);
Status linear_backward_gelu(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& weight, const Tensor& pre);

// GELU, tanh approximation (GPT-2; PyTorch gelu(approximate="tanh")). out and inp have the same shape.
Status gelu_forward(const Tensor& out, const Tensor& inp);
Status gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, GradInit init = GradInit::kAccumulate);

// out = a + b (same shapes). Backward adds dout into da and db. Either of da, db may be the very memory of dout
// (the residual stream's one shared gradient buffer): that gradient already holds dout's contribution and is left
// as it is. With kOverwrite, a gradient that is not dout's memory is set to dout.
Status residual_forward(const Tensor& out, const Tensor& a, const Tensor& b);
Status residual_backward(const Tensor& da, const Tensor& db, const Tensor& dout, GradInit init = GradInit::kAccumulate);

// Causal multi-head self-attention, scale 1/sqrt(hs). qkv [B,T,3C] holds q | k | v (each C = NH heads × hs
// channels, head-major), out [B,T,C]. `stats` is what backward needs besides qkv and out:
//  - CPU: [B,NH,T,T] softmax probabilities (zero above the diagonal); scratch [T,T].
//  - CUDA: [B,NH,T] f32 log-sum-exp of each query row's scaled scores (flash attention: the T×T matrix never
//    exists, so memory grows with T, not T²); scratch [B,NH,T] f32 (rowsum(dout ∘ out)).
// Backward recomputes what it needs; dqkv receives the gradient of all three of q, k and v.
Status attention_forward(const Tensor& out, const Tensor& stats, const Tensor& qkv, int num_heads);
Status attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout, const Tensor& out,
                          const Tensor& qkv, const Tensor& stats, int num_heads, GradInit init = GradInit::kAccumulate);
// Readies the op for calls of this shape (qkv [batch, seq, 3·channels] of `dtype`) ahead of the first: on CUDA
// (the current context) builds the cuDNN graphs it will run and grows the context's scratch to their workspace
// (AttentionKernels, cuda_context.h); nothing on the CPU. Optional: without it the first call builds them, and a
// workspace larger than the scratch makes auto contexts run zerowire's kernels instead.
Status attention_prepare(MemKind device, DataType dtype, int64_t batch, int64_t seq, int num_heads, int64_t channels);
// Shapes (and dtype: the compute dtype on the CPU, f32 on CUDA) of `stats` and `scratch` for a device.
Shape attention_stats_shape(MemKind device, int64_t batch, int64_t seq, int num_heads);
Shape attention_scratch_shape(MemKind device, int64_t batch, int64_t seq, int num_heads);

// Fused softmax + cross-entropy over the last dim. logits/probs [..., V], targets i32 [rows-shape], losses
// [rows-shape] (per-position -log p[target]). probs may be the logits' own memory (softmax in place). On the CPU
// *mean_loss receives the mean of losses (or pass null); on a CUDA device mean_loss must be null (reduce_sum the
// losses on the device instead). Backward adds dloss_per_position · (probs - onehot(target)) into dlogits;
// dlogits may be the probs' own memory when init is kOverwrite. For the mean loss dloss_per_position = 1/rows.
Status cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets,
                             double* mean_loss);
Status cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              double dloss_per_position, GradInit init = GradInit::kAccumulate);
// Forward and backward in one pass over the logits (the classifier of a training step): losses as
// cross_entropy_forward, and dlogits = dloss_per_position · (softmax(logits) - onehot(target)) WRITTEN (not
// added); dlogits may be the logits' own memory, so the f32 probabilities are never materialized.
Status cross_entropy_forward_backward(const Tensor& losses, const Tensor& dlogits, const Tensor& logits,
                                      const Tensor& targets, double dloss_per_position);

// out = Σ x, or Σ x² when `squares` (the global gradient norm): x of any shape and float dtype, out an f32
// tensor of shape [1] on x's device. Accumulates in f64 on both devices (on CUDA: per-block partial sums in the
// context's scratch, combined in a fixed order — deterministic), rounded once to f32.
Status reduce_sum(const Tensor& out, const Tensor& x, bool squares);

}  // namespace zw::tensor
