// tensor/cuda/cudnn/attention_cudnn.h — causal attention through cuDNN's fused flash-attention graphs (the
// cudnn-frontend's SDPA forward and backward), which attention.cu runs where they take the call.
//
// The graphs read q, k and v in place from qkv [B,T,3C] (strides, no copies), write out [B,T,C] and the stats
// [B,NH,T] (f32, per query row the natural-log log-sum-exp of its scaled causal scores: what zerowire's own kernels
// save, so a forward of one path and a backward of the other agree), and the backward writes dqkv [B,T,3C]. The
// backward is cuDNN's deterministic algorithm (the tensor layer's promise: every CUDA op deterministic), or its
// faster one with atomic dQ sums on a context of Determinism::kAllowFaster (ZW_CUDA_DETERMINISTIC=0); its
// workspace is the context's scratch, so the ops still allocate nothing. Graphs are built once per shape and kept in
// the context (building one takes ~0.1–1 s); a shape cuDNN cannot build is remembered with its reason.
// cuDNN does not take: f32, head sizes above 128 or not a multiple of 8, views not 16-byte aligned, GradInit::
// kAccumulate (cuDNN overwrites dqkv), a workspace larger than the context's scratch, or a shape its heuristics
// find no engine for. The caller (attention.cu) then runs zerowire's kernels, or fails when the context asks for
// cuDNN only (AttentionKernels::kCudnn).
// Builds without cuDNN or its frontend headers (cmake/cudnn.cmake) compile attention_cudnn_none.cc instead: nothing
// is taken. Non-goals: masks other than causal, dropout, FP8, paged or variable-length sequences.
#pragma once

#include <string>

#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor::cuda {

namespace dnn {

// Whether this build has the cuDNN path, and which cuDNN it runs against ("cuDNN 9.19.0, frontend 1.32.0"), or
// why there is none.
bool built();
std::string describe();

// Builds the forward and backward graphs of this shape and grows the current context's scratch to their workspace:
// true when both are ready; false, with the reason in *why_not, when cuDNN does not take the shape.
Result<bool> prepare(DataType dtype, int64_t batch, int64_t seq, int num_heads, int64_t channels, std::string* why_not);

// Runs the op on cuDNN when it takes the call: true when it ran; false when it does not take it, with the reason in
// *why_not; an error when a call it took failed. Arguments are checked by ops_attention.cc.
Result<bool> attention_forward(const Tensor& out, const Tensor& stats, const Tensor& qkv, int num_heads,
                               std::string* why_not);
Result<bool> attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv,
                                const Tensor& stats, int num_heads, bool accumulate, std::string* why_not);

}  // namespace dnn
}  // namespace zw::tensor::cuda
