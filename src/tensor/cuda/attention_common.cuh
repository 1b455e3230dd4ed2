// tensor/cuda/attention_common.cuh — what the causal attention kernels share (private to the attention .cu files).
//
// Purpose: the arguments every kernel receives and thin wrappers over the tensor-core instructions the flash kernels
// use (mma.sync m16n8k16 with f32 accumulators, ldmatrix, cp.async), with the fragment layouts spelled out once here
// so the kernels can rely on them. Element conversions and 16-bit pairs (to_f32, from_f32, Pair) are dtype.cuh's.
// Files: attention.cu (the ops' entry points, dispatch, the rowsum(dO ∘ O) kernel), attention_fwd.cu (flash
// forward), attention_bwd.cu (flash backward: dK/dV per key block, dQ per query block), attention_generic.cu
// (scalar f32 kernels for f32 and head sizes other than 64 and 128).
// Layout (all kernels): qkv [B,T,3C] row stride 3C, head h of q/k/v at channels h·hs, C + h·hs, 2C + h·hs;
// out/dout [B,T,C]; lse/dsum [B,NH,T] f32, lse the natural-log log-sum-exp of the row's scaled causal scores.
// Non-goals: masks other than causal, dropout, sm_80-only or sm_90a-only instructions (wgmma, TMA).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/cuda/dtype.cuh"
#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::tensor::cuda::attn {

// Shapes of one call (validated by ops_attention.cc; B·NH and T fit an int, checked by attention.cu).
struct Dims {
  int B = 0;             // batch
  int T = 0;             // sequence length
  int NH = 0;            // heads
  int hs = 0;            // head size
  int64_t C = 0;         // NH · hs (qkv's row stride is 3C)
  float scale = 0;       // 1 / sqrt(hs)
  float scale_log2 = 0;  // scale · log2(e): scaled scores in the exp2 domain
};

struct FwdArgs {
  const void* qkv = nullptr;  // [B,T,3C] in D
  void* out = nullptr;        // [B,T,C] in D (written)
  float* lse = nullptr;       // [B,NH,T] (written)
  Dims d;
};

struct BwdArgs {
  const void* qkv = nullptr;    // [B,T,3C] in D
  const void* dout = nullptr;   // [B,T,C] in D
  const float* lse = nullptr;   // [B,NH,T] from forward
  const float* dsum = nullptr;  // [B,NH,T] rowsum(dout ∘ out) per head (made by attention.cu first)
  void* dqkv = nullptr;         // [B,T,3C] in D: written, or added to when accumulate
  bool accumulate = false;      // GradInit::kAccumulate
  Dims d;
};

// Where one (b, h) of a backward call starts: row 0 of its q in qkv and in dqkv (k and v follow at + C and + 2C),
// of its dO, and of its slices of lse and D. HS: the head size when the kernel fixes it (0: a.d.hs at run time).
template <class E, int HS = 0>
struct BwdHead {
  const E* q;
  const E* dout;
  E* dq;
  const float* lse;
  const float* dsum;
  __device__ BwdHead(const BwdArgs& a, int b, int h) {
    const int64_t T = a.d.T, ld = 3 * a.d.C, stat = (int64_t(b) * a.d.NH + h) * T;
    const int64_t col = int64_t(h) * (HS > 0 ? HS : a.d.hs);
    q = static_cast<const E*>(a.qkv) + b * T * ld + col;
    dout = static_cast<const E*>(a.dout) + b * T * a.d.C + col;
    dq = static_cast<E*>(a.dqkv) + b * T * ld + col;
    lse = a.lse + stat;
    dsum = a.dsum + stat;
  }
};

// Launchers (each queues its kernels on `stream`; the dtype is f32, bf16 or f16).
// Flash kernels: dtype bf16/f16, hs 64/128, qkv/out/dout/dqkv 16-byte aligned (attention.cu checks).
Status flash_forward(DataType dtype, const FwdArgs& a, cudaStream_t stream);
Status flash_backward(DataType dtype, const BwdArgs& a, cudaStream_t stream);
// Scalar kernels: any of the three dtypes, 1 <= hs <= kMaxGenericHeadSize.
inline constexpr int kMaxGenericHeadSize = 256;
Status generic_forward(DataType dtype, const FwdArgs& a, cudaStream_t stream);
Status generic_backward(DataType dtype, const BwdArgs& a, cudaStream_t stream);

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// ---- tensor-core wrappers ----
// mma.sync.m16n8k16, row.col, f32 += E·E. With g = lane/4 and t = lane%4 (the layouts of the PTX ISA):
//   A (16×16, row-major): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1], a2 = A[g][2t+8..2t+9], a3 = A[g+8][2t+8..2t+9]
//   B (16×8, k × n):      b0 = B[2t..2t+1][g],  b1 = B[2t+8..2t+9][g]
//   C (16×8, f32):        c0, c1 = C[g][2t], C[g][2t+1];  c2, c3 = C[g+8][2t], C[g+8][2t+1]
// So an accumulator tile pair covering 16 columns is, element for element, the A fragment of a following product
// over those columns as k (the flash-attention register reuse of P): a0 = (c0,c1) of the first n-tile, a1 = its
// (c2,c3), a2 = (c0,c1) of the second, a3 = its (c2,c3).
template <class E>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ldmatrix.x4: lanes 8j..8j+7 give the row addresses (16 bytes each) of 8×8 matrix j; register j receives matrix
// j with lane l holding row l/4, columns 2(l%4) and 2(l%4)+1. With .trans lane l holds instead column l/4, rows
// 2(l%4) and 2(l%4)+1 (the matrix read transposed).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// cp.async: 16 bytes (L2 only) or 4 bytes, global to shared, completed by wait_group.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace zw::tensor::cuda::attn
