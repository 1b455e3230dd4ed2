// tensor/cuda/attention_fwd.cu — flash-attention forward (FlashAttention-2 tiling) for bf16/f16, head size 64/128.
//
// Design: one CTA per (b·NH + h, block of 64 queries), 4 warps × 16 query rows, the latest (heaviest) query blocks
// launched first. The CTA keeps its Q tile in shared memory and streams 64-key blocks of K and V through two
// cp.async buffers, visiting key blocks 0..its own only (causal skipping); only the diagonal block is masked (key
// > query; keys past T are there too, as they exceed every real query). Per warp and key block:
//   S = Q·Kᵀ (mma, f32) → online softmax in the exp2 domain: scores times scale·log2 e, running row max m,
//   per-thread partial row sums l, O rescaled by exp2(m_old − m_new) → O += P·V with P rounded to D straight from
//   the accumulator registers (attention_flash.cuh).
// At the end O /= l (l summed over the 4 lanes of a row) and lse = m·ln 2 + ln l: the natural-log log-sum-exp of
// the scaled scores, what the CPU's softmax normalizes by. Padding query rows past T compute harmless finite values
// (their Q rows are zero) and are never stored.
// Shared memory: Q + 2 × (K, V), 64 rows each of hs + 8 elements: 45 KiB at hs 64, 85 KiB at hs 128.
// Non-goals: split-KV for long sequences with few CTAs, wgmma/TMA (sm_90a), staging O for 16-byte stores.
#include "tensor/cuda/attention_flash.cuh"

namespace zw::tensor::cuda::attn {
namespace {

constexpr int kBq = 64;  // queries per CTA (16 per warp)
constexpr int kBk = 64;  // keys per streamed block

// One key block's online-softmax step for the warp's rows. s holds raw q·k (accumulator layout) and becomes
// P = exp2(s·scale_log2 − m) (masked entries exactly 0); m (row max, exp2 domain), l (this thread's partial row
// sum) and o are updated. row = query of c0/c1 (c2/c3: row + 8); col = key of c0 in n-tile 0.
template <int HS>
__device__ __forceinline__ void softmax_step(float (&s)[kBk / 8][4], float (&o)[HS / 8][4], float (&m)[2],
                                             float (&l)[2], float scale_log2, bool diagonal, int row, int col) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kBk / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[n][e] * scale_log2;
      if (diagonal && col + n * 8 + (e & 1) > row + (e >> 1) * 8) x = -INFINITY;
      s[n][e] = x;
      mx[e >> 1] = fmaxf(mx[e >> 1], x);
    }
  }
  float mu[2];  // the max to subtract: 0 while a row has nothing unmasked (then every p and alpha is 0)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(m[r], mx[r]);
    mu[r] = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = exp2f(m[r] - mu[r]);  // m = -inf at the start: alpha 0, and l, o are 0 anyway
    m[r] = m_new;
    l[r] *= alpha;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      o[n][2 * r] *= alpha;
      o[n][2 * r + 1] *= alpha;
    }
  }
#pragma unroll
  for (int n = 0; n < kBk / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = exp2f(s[n][e] - mu[e >> 1]);
      l[e >> 1] += s[n][e];
    }
  }
}

template <class E, int HS>
__global__ void __launch_bounds__(kFlashThreads) flash_fwd_kernel(const FwdArgs a) {
  constexpr int kLd = HS + kPad, kTileQ = kBq * kLd, kTileK = kBk * kLd;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem);
  E* sK = sQ + kTileQ;      // 2 buffers of kTileK
  E* sV = sK + 2 * kTileK;  // 2 buffers of kTileK
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int T = a.d.T, b = blockIdx.x / a.d.NH, h = blockIdx.x % a.d.NH;
  const int qb = gridDim.y - 1 - blockIdx.y, q0 = qb * kBq;
  const int64_t C = a.d.C, ld = 3 * C;
  const E* q = static_cast<const E*>(a.qkv) + int64_t(b) * T * ld + int64_t(h) * HS;  // row 0 of the head's q

  load_tile<E, HS, kBq>(sQ, q + q0 * ld, ld, T - q0, tid);
  load_tile<E, HS, kBk>(sK, q + C, ld, T, tid);
  load_tile<E, HS, kBk>(sV, q + 2 * C, ld, T, tid);
  cp_async_commit();

  float o[HS / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int row = q0 + warp * 16 + (lane >> 2);
  for (int kb = 0; kb <= qb; ++kb) {
    const int buf = kb & 1;
    if (kb < qb) {  // prefetch the next key block into the other buffer (freed by the barrier ending kb − 1)
      const int k1 = (kb + 1) * kBk;
      load_tile<E, HS, kBk>(sK + (buf ^ 1) * kTileK, q + C + k1 * ld, ld, T - k1, tid);
      load_tile<E, HS, kBk>(sV + (buf ^ 1) * kTileK, q + 2 * C + k1 * ld, ld, T - k1, tid);
    }
    cp_async_commit();
    cp_async_wait<1>();  // everything but the prefetch just issued has landed
    __syncthreads();
    float s[kBk / 8][4] = {};
    mma_nt<E, HS, kBk>(s, sQ + warp * 16 * kLd, sK + buf * kTileK, lane);
    softmax_step<HS>(s, o, m, l, a.d.scale_log2, kb == qb, row, kb * kBk + 2 * (lane & 3));
    mma_pv<E, HS, kBk>(o, s, sV + buf * kTileK, lane);
    __syncthreads();
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = 1.f / l[r];
  }
  E* out = static_cast<E*>(a.out) + (int64_t(b) * T + q0) * C + int64_t(h) * HS;
  store_acc<E, HS>(out, C, o, inv, T - q0, warp, lane, false);
  if ((lane & 3) == 0) {
    float* lse = a.lse + (int64_t(b) * a.d.NH + h) * T;
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (row + 8 * r < T) lse[row + 8 * r] = m[r] * kLn2 + logf(l[r]);
  }
}

template <class E, int HS>
Status launch(const FwdArgs& a, cudaStream_t stream) {
  constexpr size_t kSmem = size_t(kBq + 4 * kBk) * (HS + kPad) * sizeof(E);
  const dim3 grid(unsigned(a.d.B * a.d.NH), unsigned((a.d.T + kBq - 1) / kBq));
  return launch_flash(flash_fwd_kernel<E, HS>, grid, kSmem, a, stream, "attention_forward (flash kernel)");
}

}  // namespace

Status flash_forward(DataType dtype, const FwdArgs& a, cudaStream_t stream) {
  return dispatch_flash(dtype, a.d.hs, [&](auto e, auto hs) {
    return launch<typename decltype(e)::type, decltype(hs)::value>(a, stream);
  });
}

}  // namespace zw::tensor::cuda::attn
