// tensor/cuda/attention_bwd.cu — flash-attention backward for bf16/f16, head size 64/128: two deterministic
// kernels, no atomics (every gradient element has exactly one writer, its sum taken in a fixed order).
//
// Both recompute P = exp2(s·scale·log2 e − lse·log2 e) from the saved lse and take dS = P ∘ (dP − D), with
// dP = dO·Vᵀ and D = rowsum(dO ∘ O) (made by attention.cu before these run); the 1/sqrt(hs) of dS is applied once
// to the finished dK and dQ.
//  - dK/dV: one CTA per (b·NH + h, block of 64 keys), 4 warps × 16 keys; streams the query tiles at or after the
//    key block (32 or 64 queries each, double-buffered with their lse and D) and accumulates in registers
//    dV += Pᵀ·dO and dK += dSᵀ·Q, working on the transposed scores Sᵀ = K·Qᵀ so each warp's accumulators stay
//    row-aligned with its keys. Key block 0 (the most work) is launched first.
//  - dQ: one CTA per (b·NH + h, block of 64 queries), 4 warps × 16 queries; streams the key tiles at or before
//    it (32 or 64 keys) and accumulates dQ += dS·K. The latest query blocks (the most work) are launched first.
// Masking (only tiles that straddle the diagonal or run past T): P = 0 where key > query or query >= T. Padding
// rows past T are zero-filled in shared memory (attention_flash.cuh), so masked products are 0·finite.
// Tiles: 64 × 64 at hs 64; at hs 128 the streamed side has 32 rows, keeping the two hs-wide f32 accumulators
// plus the two score tiles within the register file (no spills).
// Shared memory: 55 KiB at hs 64, 69 KiB at hs 128 (either kernel).
// Non-goals: fusing the D computation, sequence-parallel dQ with atomics (not deterministic).
#include "tensor/cuda/attention_flash.cuh"

namespace zw::tensor::cuda::attn {
namespace {

constexpr int kBlock = 64;  // rows a CTA owns (keys in dK/dV, queries in dQ)
// Rows of the streamed side per step.
constexpr int stream_rows(int hs) { return hs == 64 ? 64 : 32; }

// dK/dV kernel, per warp and query tile: turns the transposed scores st (raw k·q; rows = keys, columns = queries
// of the tile) into Pᵀ and dpt (dPᵀ) into dSᵀ. key = key of c0/c1 (c2/c3: key + 8); sL/sD: the tile's lse and D.
template <int NQ>
__device__ __forceinline__ void dsoftmax_keys(float (&st)[NQ / 8][4], float (&dpt)[NQ / 8][4], const float* sL,
                                              const float* sD, float scale_log2, bool mask, int key, int q0, int T,
                                              int lane) {
#pragma unroll
  for (int n = 0; n < NQ / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int qi = n * 8 + 2 * (lane & 3) + (e & 1), i = q0 + qi, j = key + (e >> 1) * 8;
      float p = exp2f(st[n][e] * scale_log2 - sL[qi] * kLog2e);
      if (mask && (i < j || i >= T)) p = 0.f;
      st[n][e] = p;
      dpt[n][e] = p * (dpt[n][e] - sD[qi]);
    }
  }
}

template <class E, int HS>
__global__ void __launch_bounds__(kFlashThreads) flash_bwd_dkdv_kernel(const BwdArgs a) {
  constexpr int kBq = stream_rows(HS), kLd = HS + kPad, kTileK = kBlock * kLd, kTileQ = kBq * kLd;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sK = reinterpret_cast<E*>(smem);
  E* sV = sK + kTileK;
  E* sQ = sV + kTileK;                                     // 2 buffers of kTileQ
  E* sdO = sQ + 2 * kTileQ;                                // 2 buffers of kTileQ
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTileQ);  // 2 buffers of kBq lse
  float* sD = sL + 2 * kBq;                                // 2 buffers of kBq D
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, T = a.d.T;
  const BwdHead<E, HS> g(a, blockIdx.x / a.d.NH, blockIdx.x % a.d.NH);
  const int64_t C = a.d.C, ld = 3 * C;
  const int k0 = blockIdx.y * kBlock, qt0 = k0 / kBq, nqt = (T + kBq - 1) / kBq;

  auto load_queries = [&](int qt, int buf) {
    const int q0 = qt * kBq;
    load_tile<E, HS, kBq>(sQ + buf * kTileQ, g.q + q0 * ld, ld, T - q0, tid);
    load_tile<E, HS, kBq>(sdO + buf * kTileQ, g.dout + q0 * C, C, T - q0, tid);
    load_vec<kBq>(sL + buf * kBq, g.lse + q0, T - q0, tid);
    load_vec<kBq>(sD + buf * kBq, g.dsum + q0, T - q0, tid);
  };
  load_tile<E, HS, kBlock>(sK, g.q + C + k0 * ld, ld, T - k0, tid);
  load_tile<E, HS, kBlock>(sV, g.q + 2 * C + k0 * ld, ld, T - k0, tid);
  load_queries(qt0, 0);
  cp_async_commit();

  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  const int key = k0 + warp * 16 + (lane >> 2);
  for (int qt = qt0; qt < nqt; ++qt) {
    const int buf = (qt - qt0) & 1, q0 = qt * kBq;
    if (qt + 1 < nqt) load_queries(qt + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    float st[kBq / 8][4] = {}, dpt[kBq / 8][4] = {};
    mma_nt<E, HS, kBq>(st, sK + warp * 16 * kLd, sQ + buf * kTileQ, lane);
    mma_nt<E, HS, kBq>(dpt, sV + warp * 16 * kLd, sdO + buf * kTileQ, lane);
    const bool mask = q0 < k0 + kBlock || q0 + kBq > T;
    dsoftmax_keys<kBq>(st, dpt, sL + buf * kBq, sD + buf * kBq, a.d.scale_log2, mask, key, q0, T, lane);
    mma_pv<E, HS, kBq>(dv, st, sdO + buf * kTileQ, lane);
    mma_pv<E, HS, kBq>(dk, dpt, sQ + buf * kTileQ, lane);
    __syncthreads();
  }
  const float mk[2] = {a.d.scale, a.d.scale}, mv[2] = {1.f, 1.f};
  store_acc<E, HS>(g.dq + C + k0 * ld, ld, dk, mk, T - k0, warp, lane, a.accumulate);
  store_acc<E, HS>(g.dq + 2 * C + k0 * ld, ld, dv, mv, T - k0, warp, lane, a.accumulate);
}

// dQ kernel, per warp and key tile: s (raw q·k) becomes P and dp becomes dS. row = query of c0/c1 (c2/c3: row + 8),
// col = key of c0 in n-tile 0; lse2/dsum: the rows' lse·log2 e and D.
template <int NK>
__device__ __forceinline__ void dsoftmax_queries(const float (&s)[NK / 8][4], float (&dp)[NK / 8][4],
                                                 const float (&lse2)[2], const float (&dsum)[2], float scale_log2,
                                                 bool mask, int row, int col, int T) {
#pragma unroll
  for (int n = 0; n < NK / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = row + (e >> 1) * 8, j = col + n * 8 + (e & 1);
      float p = exp2f(s[n][e] * scale_log2 - lse2[e >> 1]);
      if (mask && (j > i || i >= T)) p = 0.f;
      dp[n][e] = p * (dp[n][e] - dsum[e >> 1]);
    }
  }
}

template <class E, int HS>
__global__ void __launch_bounds__(kFlashThreads) flash_bwd_dq_kernel(const BwdArgs a) {
  constexpr int kBk = stream_rows(HS), kLd = HS + kPad, kTileQ = kBlock * kLd, kTileK = kBk * kLd;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem);
  E* sdO = sQ + kTileQ;
  E* sK = sdO + kTileQ;     // 2 buffers of kTileK
  E* sV = sK + 2 * kTileK;  // 2 buffers of kTileK
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, T = a.d.T;
  const BwdHead<E, HS> g(a, blockIdx.x / a.d.NH, blockIdx.x % a.d.NH);
  const int64_t C = a.d.C, ld = 3 * C;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBlock;
  const int nkt = (min(q0 + kBlock, T) + kBk - 1) / kBk;

  auto load_keys = [&](int kt, int buf) {
    const int k0 = kt * kBk;
    load_tile<E, HS, kBk>(sK + buf * kTileK, g.q + C + k0 * ld, ld, T - k0, tid);
    load_tile<E, HS, kBk>(sV + buf * kTileK, g.q + 2 * C + k0 * ld, ld, T - k0, tid);
  };
  load_tile<E, HS, kBlock>(sQ, g.q + q0 * ld, ld, T - q0, tid);
  load_tile<E, HS, kBlock>(sdO, g.dout + q0 * C, C, T - q0, tid);
  load_keys(0, 0);
  cp_async_commit();

  const int row = q0 + warp * 16 + (lane >> 2);
  float lse2[2], dsum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row + 8 * r;
    lse2[r] = i < T ? g.lse[i] * kLog2e : 0.f;
    dsum[r] = i < T ? g.dsum[i] : 0.f;
  }
  float dq[HS / 8][4] = {};
  for (int kt = 0; kt < nkt; ++kt) {
    const int buf = kt & 1, k0 = kt * kBk;
    if (kt + 1 < nkt) load_keys(kt + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    float s[kBk / 8][4] = {}, dp[kBk / 8][4] = {};
    mma_nt<E, HS, kBk>(s, sQ + warp * 16 * kLd, sK + buf * kTileK, lane);
    mma_nt<E, HS, kBk>(dp, sdO + warp * 16 * kLd, sV + buf * kTileK, lane);
    const bool mask = k0 + kBk > q0 || q0 + kBlock > T;
    dsoftmax_queries<kBk>(s, dp, lse2, dsum, a.d.scale_log2, mask, row, k0 + 2 * (lane & 3), T);
    mma_pv<E, HS, kBk>(dq, dp, sK + buf * kTileK, lane);
    __syncthreads();
  }
  const float mq[2] = {a.d.scale, a.d.scale};
  store_acc<E, HS>(g.dq + q0 * ld, ld, dq, mq, T - q0, warp, lane, a.accumulate);
}

template <class E, int HS>
Status launch(const BwdArgs& a, cudaStream_t stream) {
  constexpr int kRows = stream_rows(HS);
  // Either kernel: 2 resident tiles of kBlock rows + 2 double-buffered tiles of kRows rows (+ lse, D for dK/dV).
  constexpr size_t kTiles = size_t(2 * kBlock + 4 * kRows) * (HS + kPad) * sizeof(E);
  constexpr size_t kSmemKV = kTiles + 4 * kRows * sizeof(float), kSmemQ = kTiles;
  const unsigned bh = unsigned(a.d.B * a.d.NH), blocks = unsigned((a.d.T + kBlock - 1) / kBlock);
  ZW_TRY(launch_flash(flash_bwd_dkdv_kernel<E, HS>, dim3(bh, blocks), kSmemKV, a, stream,
                      "attention_backward (flash dK/dV kernel)"));
  return launch_flash(flash_bwd_dq_kernel<E, HS>, dim3(bh, blocks), kSmemQ, a, stream,
                      "attention_backward (flash dQ kernel)");
}

}  // namespace

Status flash_backward(DataType dtype, const BwdArgs& a, cudaStream_t stream) {
  return dispatch_flash(dtype, a.d.hs, [&](auto e, auto hs) {
    return launch<typename decltype(e)::type, decltype(hs)::value>(a, stream);
  });
}

}  // namespace zw::tensor::cuda::attn
