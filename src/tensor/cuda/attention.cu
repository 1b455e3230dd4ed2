// tensor/cuda/attention.cu — cuda::attention_forward / cuda::attention_backward: which kernels run, and the
// rowsum(dO ∘ O) pass that backward starts with.
//
// Dispatch: cuDNN's fused flash attention first where the context allows it (CudaContextOptions::attention,
// ZW_CUDA_ATTENTION; cudnn/attention_cudnn.h says which calls it takes). Then zerowire's own kernels: the flash
// kernels (attention_fwd.cu, attention_bwd.cu: tensor cores, cp.async) take bf16 and f16 with
// head size 64 or 128 when qkv, out, dout and dqkv start on 16-byte boundaries (the 16-byte cp.async and 4-byte
// pair stores need it; a view at an odd offset into a larger buffer may not); every other case (f32, other head
// sizes up to 256, unaligned views) runs the scalar kernels of attention_generic.cu. Both save the same stats
// (per query row the natural-log log-sum-exp of its scaled causal scores) and read the same D, so forward and
// backward may come from different paths.
// Backward: D_i = Σ_c dO[i,c]·O[i,c] per (b, h, i) into `scratch` (one warp per row, a fixed shuffle tree), then
// the dK/dV kernel and the dQ kernel, each writing (or adding to) its own part of dqkv — deterministic, no atomics.
// Memory: nothing is allocated; stats and scratch are [B,NH,T], and no T×T buffer exists anywhere.
// Non-goals: argument checking (ops_attention.cc does it), masks other than causal, dropout.
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "tensor/cuda/attention_common.cuh"
#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/cudnn/attention_cudnn.h"

namespace zw::tensor::cuda {
namespace {

constexpr int kDsumWarps = 8;  // rows per CTA of the D kernel

// dsum[b, h, t] = Σ_c dout[b, t, h·hs + c] · out[b, t, h·hs + c], one warp per (b, t, h).
template <class E>
__global__ void __launch_bounds__(kDsumWarps * 32)
    dsum_kernel(const E* dout, const E* out, float* dsum, int64_t rows, int T, int NH, int hs) {
  const int64_t w = int64_t(blockIdx.x) * kDsumWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= rows) return;  // whole warps leave together
  const int64_t bt = w / NH;
  const int h = int(w % NH);
  const int64_t off = bt * NH * hs + int64_t(h) * hs;
  float acc = 0.f;
  for (int c = lane; c < hs; c += 32) acc = fmaf(to_f32(dout[off + c]), to_f32(out[off + c]), acc);
  acc = warp_sum(acc);
  if (lane == 0) dsum[(bt / T * NH + h) * T + bt % T] = acc;
}

template <class E>
Status launch_dsum(const Tensor& dout, const Tensor& out, const Tensor& dsum, const attn::Dims& d) {
  const int64_t rows = int64_t(d.B) * d.T * d.NH;
  const int64_t blocks = (rows + kDsumWarps - 1) / kDsumWarps;
  if (blocks > INT_MAX) return Status(Code::kUnsupported, "attention_backward: too many rows for the D kernel");
  dsum_kernel<E><<<unsigned(blocks), kDsumWarps * 32, 0, stream()>>>(dout.data<E>(), out.data<E>(), dsum.data<float>(),
                                                                     rows, d.T, d.NH, d.hs);
  ZW_CUDA_LAUNCH_TRY("attention_backward (D kernel)");
  return Status();
}

// The call's dims; kUnsupported for shapes the kernels' grids cannot cover.
Result<attn::Dims> dims_of(const Tensor& qkv, int num_heads) {
  attn::Dims d;
  const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3, hs = C / num_heads;
  // Grids are (B·NH, ceil(T / 16) at most): x up to 2³¹ − 1, y up to 65535.
  if (B * num_heads > INT_MAX || T > int64_t(65535) * 16)
    return Status(Code::kUnsupported, "attention on CUDA: batch × heads " + std::to_string(B * num_heads) +
                                          " or sequence length " + std::to_string(T) + " is too large");
  if (hs > attn::kMaxGenericHeadSize)
    return Status(Code::kUnsupported, "attention on CUDA: head size " + std::to_string(hs) + " is above " +
                                          std::to_string(attn::kMaxGenericHeadSize));
  d.B = int(B);
  d.T = int(T);
  d.NH = num_heads;
  d.hs = int(hs);
  d.C = C;
  const double scale = 1.0 / std::sqrt(double(hs));
  d.scale = float(scale);
  d.scale_log2 = float(scale * 1.4426950408889634);
  return d;
}

// Whether the tensor-core kernels take this call (see the header comment).
bool use_flash(DataType dtype, int hs, std::initializer_list<const Tensor*> tensors) {
  if (dtype != DataType::kBFloat16 && dtype != DataType::kFloat16) return false;
  if (hs != 64 && hs != 128) return false;
  for (const Tensor* t : tensors)
    if (!aligned16(t->mem.ptr)) return false;
  return true;
}

// Whether cuDNN ran the call (cudnn/attention_cudnn.h), by the context's choice of kernels: kCudnn fails for a call
// cuDNN does not take; kZerowire never asks it.
Result<bool> ran_on_cudnn(const char* op, const std::function<Result<bool>(std::string*)>& run) {
  const AttentionKernels want = current().attention;
  if (want == AttentionKernels::kZerowire) return false;
  std::string why_not;
  ZW_ASSIGN_OR_RETURN(const bool ran, run(&why_not));
  if (!ran && want == AttentionKernels::kCudnn)
    return Status(Code::kUnsupported, std::string(op) +
                                          " on cuDNN only (AttentionKernels::kCudnn, ZW_CUDA_ATTENTION="
                                          "cudnn): " +
                                          why_not);
  return ran;
}

}  // namespace

Status attention_forward(const Tensor& out, const Tensor& stats, const Tensor& qkv, int num_heads) {
  ZW_ASSIGN_OR_RETURN(const attn::Dims d, dims_of(qkv, num_heads));
  if (d.B == 0 || d.T == 0 || d.hs == 0) return Status();
  ZW_ASSIGN_OR_RETURN(const bool on_cudnn, ran_on_cudnn("attention_forward", [&](std::string* why_not) {
                        return dnn::attention_forward(out, stats, qkv, num_heads, why_not);
                      }));
  if (on_cudnn) return Status();
  attn::FwdArgs a;
  a.qkv = qkv.mem.ptr;
  a.out = out.mem.ptr;
  a.lse = stats.data<float>();
  a.d = d;
  if (use_flash(qkv.dtype, d.hs, {&qkv, &out})) return attn::flash_forward(qkv.dtype, a, stream());
  return attn::generic_forward(qkv.dtype, a, stream());
}

Status attention_prepare(DataType dtype, int64_t batch, int64_t seq, int num_heads, int64_t channels) {
  const AttentionKernels want = current().attention;
  if (want == AttentionKernels::kZerowire) return Status();
  std::string why_not;
  ZW_ASSIGN_OR_RETURN(const bool ready, dnn::prepare(dtype, batch, seq, num_heads, channels, &why_not));
  if (!ready && want == AttentionKernels::kCudnn)
    return Status(Code::kUnsupported,
                  "attention on cuDNN only (AttentionKernels::kCudnn, ZW_CUDA_ATTENTION=cudnn): " + why_not);
  return Status();
}

Status attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout, const Tensor& out,
                          const Tensor& qkv, const Tensor& stats, int num_heads, GradInit init) {
  ZW_ASSIGN_OR_RETURN(const attn::Dims d, dims_of(qkv, num_heads));
  if (d.B == 0 || d.T == 0 || d.hs == 0) return Status();
  ZW_ASSIGN_OR_RETURN(const bool on_cudnn, ran_on_cudnn("attention_backward", [&](std::string* why_not) {
                        return dnn::attention_backward(dqkv, dout, out, qkv, stats, num_heads,
                                                       init == GradInit::kAccumulate, why_not);
                      }));
  if (on_cudnn) return Status();
  switch (qkv.dtype) {
    case DataType::kBFloat16:
      ZW_TRY(launch_dsum<__nv_bfloat16>(dout, out, scratch, d));
      break;
    case DataType::kFloat16:
      ZW_TRY(launch_dsum<__half>(dout, out, scratch, d));
      break;
    default:
      ZW_TRY(launch_dsum<float>(dout, out, scratch, d));
      break;
  }
  attn::BwdArgs a;
  a.qkv = qkv.mem.ptr;
  a.dout = dout.mem.ptr;
  a.lse = stats.data<float>();
  a.dsum = scratch.data<float>();
  a.dqkv = dqkv.mem.ptr;
  a.accumulate = init == GradInit::kAccumulate;
  a.d = d;
  if (use_flash(qkv.dtype, d.hs, {&qkv, &dout, &dqkv})) return attn::flash_backward(qkv.dtype, a, stream());
  return attn::generic_backward(qkv.dtype, a, stream());
}

}  // namespace zw::tensor::cuda
