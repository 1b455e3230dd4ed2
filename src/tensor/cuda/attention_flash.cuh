// tensor/cuda/attention_flash.cuh — the tile pieces the flash kernels share (attention_fwd.cu, attention_bwd.cu).
//
// Design: every flash kernel runs 4 warps (128 threads); each warp owns 16 rows of its CTA's block (queries in the
// forward and dQ kernels, keys in the dK/dV kernel) and the CTA streams tiles of the other side through shared
// memory with cp.async double buffering. Shared tiles are row-major [rows][hs] in D with a row stride of hs + 8
// elements: the 16-byte pad moves each row 4 banks on (144 or 272 bytes per row), so the 8 row addresses of every
// ldmatrix phase hit 8 distinct 4-bank groups and the loads are conflict-free without a swizzle.
// The two warp products cover every matmul of forward and backward:
//   mma_nt: C[16×N] += A[16×hs]·B[N×hs]ᵀ, both operands rows of shared tiles (S = Q·Kᵀ, dP = dO·Vᵀ, and the
//           transposed Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ).
//   mma_pv: C[16×hs] += P[16×N]·V[N×hs], P in accumulator registers (as mma_nt left it), V rows of a shared tile
//           read with ldmatrix.trans (O += P·V, dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K).
// Non-goals: anything but head sizes that are multiples of 16 (the flash kernels instantiate 64 and 128).
#pragma once

#include <type_traits>

#include "tensor/cuda/attention_common.cuh"
#include "tensor/cuda/cuda_check.h"

namespace zw::tensor::cuda::attn {

inline constexpr int kFlashThreads = 128;  // 4 warps
inline constexpr int kPad = 8;             // elements of padding per shared row (16 bytes)

// Queues `kernel` on `stream` over `grid` with kFlashThreads threads per CTA and `smem` bytes of dynamic shared
// memory (opted into first: the flash kernels need more than the default 48 KiB); `what` names it in an error.
template <class Args>
Status launch_flash(void (*kernel)(Args), dim3 grid, size_t smem, const Args& a, cudaStream_t stream,
                    const char* what) {
  ZW_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, kFlashThreads, smem, stream>>>(a);
  ZW_CUDA_LAUNCH_TRY(what);
  return Status();
}

// Calls fn(std::type_identity<E>{}, std::integral_constant<int, HS>{}) with E the element type of `dtype` (bf16,
// else f16) and HS the head size (64, else 128): the instantiations the flash kernels have (attention.cu checks).
template <class Fn>
Status dispatch_flash(DataType dtype, int hs, Fn&& fn) {
  auto with_hs = [&](auto e) -> Status {
    return hs == 64 ? fn(e, std::integral_constant<int, 64>{}) : fn(e, std::integral_constant<int, 128>{});
  };
  return dtype == DataType::kBFloat16 ? with_hs(std::type_identity<__nv_bfloat16>{})
                                      : with_hs(std::type_identity<__half>{});
}

// Rows [0, ROWS) of a tile, global (row stride ld elements, 16-byte aligned rows) to shared (stride HS + kPad),
// with cp.async; rows >= valid are zero-filled and never read, so padding rows past T contribute exact zeros.
template <class E, int HS, int ROWS>
__device__ __forceinline__ void load_tile(E* s, const E* g, int64_t ld, int valid, int tid) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
  static_assert(HS % 16 == 0 && (ROWS * kChunks) % kFlashThreads == 0, "tile must split evenly over the CTA");
#pragma unroll
  for (int i = 0; i < ROWS * kChunks / kFlashThreads; ++i) {
    const int idx = tid + i * kFlashThreads, r = idx / kChunks, c = idx % kChunks;
    E* dst = s + r * (HS + kPad) + c * 8;
    if (r < valid) {
      cp_async16(dst, g + r * ld + c * 8);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
}

// N f32 values with 4-byte cp.async; entries >= valid are set to 0 instead.
template <int N>
__device__ __forceinline__ void load_vec(float* s, const float* g, int valid, int tid) {
  for (int i = tid; i < N; i += kFlashThreads) {
    if (i < valid) {
      cp_async4(s + i, g + i);
    } else {
      s[i] = 0.f;
    }
  }
}

// c[n] (n-tile n = columns 8n..8n+7) += A·Bᵀ for the warp: A = 16 rows at sA, B = N rows at sB, both shared
// tiles of stride HS + kPad, k running over the HS columns.
//  A fragment (ldmatrix.x4): lane l addresses row l%16, column 8·(l/16) of the 16×16 step: matrices 0..3 are
//    (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3.
//  B fragments (ldmatrix.x4, not transposed): B[k][n] = rowB n, column k, so an 8×8 matrix of 8 B rows × 8 k gives
//    lane l row l/4 = n, columns 2(l%4).. = k, exactly b0 (or b1 for k 8-15). Lane l addresses B row
//    16np + l%8 + 8·(l/16), column 8·((l/8)%2): matrices (n 0-7, k 0-7) = b0 and (n 0-7, k 8-15) = b1 of n-tile
//    2np, then (n 8-15, k 0-7), (n 8-15, k 8-15) = b0, b1 of n-tile 2np+1.
template <class E, int HS, int N>
__device__ __forceinline__ void mma_nt(float (&c)[N / 8][4], const E* sA, const E* sB, int lane) {
  constexpr int kLd = HS + kPad;
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a, sA + (lane & 15) * kLd + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, sB + (np * 16 + (lane & 7) + (lane >> 4) * 8) * kLd + kk * 16 + ((lane >> 3) & 1) * 8);
      mma16816<E>(c[2 * np], a, b[0], b[1]);
      mma16816<E>(c[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// c[16×HS] += P·V for the warp: P[16×N] in accumulator layout (p[n] = columns 8n..8n+7, rounded to E here),
// V = N rows at sV (stride HS + kPad).
//  A fragment of k-step ks (P columns 16ks..16ks+15): (c0,c1), (c2,c3) of n-tile 2ks, then of n-tile 2ks+1.
//  B fragments (ldmatrix.x4.trans): B[k][n] = V[k][n]; a transposed 8×8 matrix of 8 V rows (k) × 8 columns (n)
//    gives lane l column l/4 = n, rows 2(l%4).. = k: b0 (k 0-7) or b1 (k 8-15). Lane l addresses V row
//    16ks + l%8 + 8·((l/8)%2), column 16dp + 8·(l/16): matrices (k 0-7, n 0-7) = b0 and (k 8-15, n 0-7) = b1 of
//    n-tile 2dp, then (k 0-7, n 8-15), (k 8-15, n 8-15) = b0, b1 of n-tile 2dp+1.
template <class E, int HS, int N>
__device__ __forceinline__ void mma_pv(float (&c)[HS / 8][4], const float (&p)[N / 8][4], const E* sV, int lane) {
  constexpr int kLd = HS + kPad;
#pragma unroll
  for (int ks = 0; ks < N / 16; ++ks) {
    const uint32_t a[4] = {Pair<E>::pack(p[2 * ks][0], p[2 * ks][1]), Pair<E>::pack(p[2 * ks][2], p[2 * ks][3]),
                           Pair<E>::pack(p[2 * ks + 1][0], p[2 * ks + 1][1]),
                           Pair<E>::pack(p[2 * ks + 1][2], p[2 * ks + 1][3])};
#pragma unroll
    for (int dp = 0; dp < HS / 16; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, sV + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd + dp * 16 + (lane >> 4) * 8);
      mma16816<E>(c[2 * dp], a, b[0], b[1]);
      mma16816<E>(c[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Writes the warp's 16×HS accumulator into global memory: its rows are warp·16 + lane/4 (c0, c1, times mul[0])
// and that + 8 (c2, c3, times mul[1]) of the block whose row 0 is at g (row stride ld elements), columns
// 8n + 2(lane%4) and + 1 as one 32-bit pair store. Rows >= valid are skipped; with accumulate the stored value is
// round(old + x), the sum taken in f32.
template <class E, int HS>
__device__ __forceinline__ void store_acc(E* g, int64_t ld, const float (&c)[HS / 8][4], const float (&mul)[2],
                                          int valid, int warp, int lane, bool accumulate) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + (lane >> 2) + r * 8;
    if (row >= valid) continue;
    E* p = g + row * ld + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      uint32_t* w = reinterpret_cast<uint32_t*>(p + n * 8);
      float x0 = c[n][2 * r] * mul[r], x1 = c[n][2 * r + 1] * mul[r];
      if (accumulate) {
        const float2 old = Pair<E>::unpack(*w);
        x0 += old.x;
        x1 += old.y;
      }
      *w = Pair<E>::pack(x0, x1);
    }
  }
}

}  // namespace zw::tensor::cuda::attn
