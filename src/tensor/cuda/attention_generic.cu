// tensor/cuda/attention_generic.cu — causal attention for every case the flash kernels do not take: f32, any head
// size from 1 to 256, unaligned tensors. Correctness over speed: it is the f32 reference of the CUDA path and the
// path of the tests' tiny models.
//
// Design: the flash algorithm with scalar f32 math from shared memory and tiles of 16 queries × 16 keys, 128
// threads per CTA, everything (scores, softmax, products) in f32 and in a fixed order:
//  - forward: one CTA per (b·NH + h, query tile), streaming the key tiles at or before it; online softmax with
//    natural exp (row max m, row sum l, output rescaled by exp(m_old − m_new)); out = O / l, lse = m + ln l.
//  - backward: the same two kernels as the flash path (attention_bwd.cu), deterministic without atomics: dK/dV
//    per key tile over the query tiles at or after it, dQ per query tile over the key tiles at or before it,
//    recomputing P = exp(s − lse) and dS = P ∘ (dP − D); the 1/sqrt(hs) of dS is applied to the finished dK, dQ.
// A score (i, j) takes part only when j <= i < T; rows past T are zero-filled and never stored.
// Shared memory (f32): forward 4 tiles of 16 × hs, backward dK/dV 6, dQ 5, plus 16 × 16 score tiles: up to 100 KiB
// at hs 256 (opted in per launch).
// Non-goals: speed, tensor cores, head sizes above 256.
#include <cmath>

#include "tensor/cuda/attention_common.cuh"
#include "tensor/cuda/cuda_check.h"

namespace zw::tensor::cuda::attn {
namespace {

constexpr int kTile = 16;      // queries and keys per tile
constexpr int kThreads = 128;  // per CTA

// Rows [0, kTile) × hs of a head (row 0 at g, stride ld) into shared f32; rows >= valid become 0.
template <class E>
__device__ void load_rows(float* s, const E* g, int64_t ld, int hs, int valid, int tid) {
  for (int e = tid; e < kTile * hs; e += kThreads) {
    const int r = e / hs, d = e - r * hs;
    s[e] = r < valid ? to_f32(g[r * ld + d]) : 0.f;
  }
}

// Rows [0, min(kTile, valid)) of shared f32 (times mul) into a head (row 0 at g); adds what is there when accumulate.
template <class E>
__device__ void store_rows(E* g, int64_t ld, const float* s, int hs, int valid, float mul, bool accumulate, int tid) {
  for (int e = tid; e < kTile * hs; e += kThreads) {
    const int r = e / hs, d = e - r * hs;
    if (r >= valid) continue;
    E* p = g + r * ld + d;
    float x = s[e] * mul;
    if (accumulate) x += to_f32(*p);
    *p = from_f32<E>(x);
  }
}

// Dot product of two shared rows.
__device__ __forceinline__ float dot(const float* x, const float* y, int hs) {
  float acc = 0.f;
  for (int d = 0; d < hs; ++d) acc = fmaf(x[d], y[d], acc);
  return acc;
}

template <class E>
__global__ void __launch_bounds__(kThreads) generic_fwd_kernel(const FwdArgs a) {
  extern __shared__ float sm[];
  const int hs = a.d.hs, T = a.d.T, tid = threadIdx.x;
  float* sQ = sm;
  float* sK = sQ + kTile * hs;
  float* sV = sK + kTile * hs;
  float* sO = sV + kTile * hs;
  float* sS = sO + kTile * hs;     // scores, then probabilities [query][key]
  float* sM = sS + kTile * kTile;  // running row max
  float* sL = sM + kTile;          // running row sum
  float* sA = sL + kTile;          // this step's rescale factor
  const int b = blockIdx.x / a.d.NH, h = blockIdx.x % a.d.NH, qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kTile;
  const int64_t C = a.d.C, ld = 3 * C;
  const E* q = static_cast<const E*>(a.qkv) + int64_t(b) * T * ld + int64_t(h) * hs;

  load_rows(sQ, q + q0 * ld, ld, hs, T - q0, tid);
  for (int e = tid; e < kTile * hs; e += kThreads) sO[e] = 0.f;
  if (tid < kTile) {
    sM[tid] = -INFINITY;
    sL[tid] = 0.f;
  }
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous step is done with sK, sV, sS
    load_rows(sK, q + C + k0 * ld, ld, hs, T - k0, tid);
    load_rows(sV, q + 2 * C + k0 * ld, ld, hs, T - k0, tid);
    __syncthreads();
    for (int e = tid; e < kTile * kTile; e += kThreads) {
      const int r = e / kTile, c = e % kTile, i = q0 + r, j = k0 + c;
      sS[e] = (j <= i && j < T) ? dot(sQ + r * hs, sK + c * hs, hs) * a.d.scale : -INFINITY;
    }
    __syncthreads();
    if (tid < kTile) {  // one thread per row: the online-softmax update
      float* row = sS + tid * kTile;
      float mx = sM[tid];
      for (int c = 0; c < kTile; ++c) mx = fmaxf(mx, row[c]);
      const float mu = mx == -INFINITY ? 0.f : mx, alpha = expf(sM[tid] - mu);
      float sum = 0.f;
      for (int c = 0; c < kTile; ++c) sum += (row[c] = expf(row[c] - mu));
      sL[tid] = sL[tid] * alpha + sum;
      sM[tid] = mx;
      sA[tid] = alpha;
    }
    __syncthreads();
    for (int e = tid; e < kTile * hs; e += kThreads) {
      const int r = e / hs, d = e - r * hs;
      float acc = sO[e] * sA[r];
      for (int c = 0; c < kTile; ++c) acc = fmaf(sS[r * kTile + c], sV[c * hs + d], acc);
      sO[e] = acc;
    }
  }
  __syncthreads();
  for (int e = tid; e < kTile * hs; e += kThreads) sO[e] /= sL[e / hs];
  __syncthreads();
  store_rows(static_cast<E*>(a.out) + (int64_t(b) * T + q0) * C + int64_t(h) * hs, C, sO, hs, T - q0, 1.f, false, tid);
  if (tid < kTile && q0 + tid < T) a.lse[(int64_t(b) * a.d.NH + h) * T + q0 + tid] = sM[tid] + logf(sL[tid]);
}

// Shared tiles of the backward kernels: Q, dO of a query tile, K, V of a key tile, lse and D of the queries.
struct BwdTiles {
  float* q;
  float* dout;
  float* k;
  float* v;
  float* lse;
  float* dsum;
};

// Loads the query tile at q0 (Q, dO, lse, D) or the key tile at k0 (K, V) of a head into t.
template <class E>
__device__ void load_query_tile(const BwdTiles& t, const BwdHead<E>& g, const Dims& d, int q0, int tid) {
  load_rows(t.q, g.q + q0 * 3 * d.C, 3 * d.C, d.hs, d.T - q0, tid);
  load_rows(t.dout, g.dout + q0 * d.C, d.C, d.hs, d.T - q0, tid);
  if (tid < kTile) {
    t.lse[tid] = q0 + tid < d.T ? g.lse[q0 + tid] : 0.f;
    t.dsum[tid] = q0 + tid < d.T ? g.dsum[q0 + tid] : 0.f;
  }
}
template <class E>
__device__ void load_key_tile(const BwdTiles& t, const BwdHead<E>& g, const Dims& d, int k0, int tid) {
  load_rows(t.k, g.q + d.C + k0 * 3 * d.C, 3 * d.C, d.hs, d.T - k0, tid);
  load_rows(t.v, g.q + 2 * d.C + k0 * 3 * d.C, 3 * d.C, d.hs, d.T - k0, tid);
}

// P and dS of a query tile × key tile ([query][key]); sP may be null (the dQ kernel needs dS only).
__device__ void probs_and_grads(float* sP, float* sdS, const BwdTiles& t, const Dims& d, int q0, int k0, int tid) {
  for (int e = tid; e < kTile * kTile; e += kThreads) {
    const int r = e / kTile, c = e % kTile, i = q0 + r, j = k0 + c;
    float p = 0.f, ds = 0.f;
    if (i < d.T && j <= i) {
      p = expf(dot(t.q + r * d.hs, t.k + c * d.hs, d.hs) * d.scale - t.lse[r]);
      ds = p * (dot(t.dout + r * d.hs, t.v + c * d.hs, d.hs) - t.dsum[r]);
    }
    if (sP != nullptr) sP[e] = p;
    sdS[e] = ds;
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads) generic_bwd_dkdv_kernel(const BwdArgs a) {
  extern __shared__ float sm[];
  const int hs = a.d.hs, T = a.d.T, tid = threadIdx.x, tile = kTile * hs;
  const BwdTiles t{sm, sm + tile, sm + 2 * tile, sm + 3 * tile, sm + 6 * tile, sm + 6 * tile + kTile};
  float* sdK = sm + 4 * tile;
  float* sdV = sm + 5 * tile;
  float* sP = sm + 6 * tile + 2 * kTile;
  float* sdS = sP + kTile * kTile;
  const BwdHead<E> g(a, blockIdx.x / a.d.NH, blockIdx.x % a.d.NH);
  const int k0 = blockIdx.y * kTile;

  load_key_tile(t, g, a.d, k0, tid);
  for (int e = tid; e < tile; e += kThreads) sdK[e] = sdV[e] = 0.f;
  for (int q0 = k0; q0 < T; q0 += kTile) {
    __syncthreads();  // the previous step is done with the query tile and sP, sdS
    load_query_tile(t, g, a.d, q0, tid);
    __syncthreads();
    probs_and_grads(sP, sdS, t, a.d, q0, k0, tid);
    __syncthreads();
    for (int e = tid; e < tile; e += kThreads) {  // element (key c, channel d), always the same thread's
      const int c = e / hs, d = e - c * hs;
      float dv = sdV[e], dk = sdK[e];
      for (int r = 0; r < kTile; ++r) {
        dv = fmaf(sP[r * kTile + c], t.dout[r * hs + d], dv);
        dk = fmaf(sdS[r * kTile + c], t.q[r * hs + d], dk);
      }
      sdV[e] = dv;
      sdK[e] = dk;
    }
  }
  __syncthreads();
  const int64_t ld = 3 * a.d.C;
  store_rows(g.dq + a.d.C + k0 * ld, ld, sdK, hs, T - k0, a.d.scale, a.accumulate, tid);
  store_rows(g.dq + 2 * a.d.C + k0 * ld, ld, sdV, hs, T - k0, 1.f, a.accumulate, tid);
}

template <class E>
__global__ void __launch_bounds__(kThreads) generic_bwd_dq_kernel(const BwdArgs a) {
  extern __shared__ float sm[];
  const int hs = a.d.hs, tid = threadIdx.x, tile = kTile * hs;
  const BwdTiles t{sm, sm + tile, sm + 2 * tile, sm + 3 * tile, sm + 5 * tile, sm + 5 * tile + kTile};
  float* sdQ = sm + 4 * tile;
  float* sdS = sm + 5 * tile + 2 * kTile;
  const BwdHead<E> g(a, blockIdx.x / a.d.NH, blockIdx.x % a.d.NH);
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kTile;

  load_query_tile(t, g, a.d, q0, tid);
  for (int e = tid; e < tile; e += kThreads) sdQ[e] = 0.f;
  for (int k0 = 0; k0 <= q0; k0 += kTile) {
    __syncthreads();  // the previous step is done with the key tile and sdS
    load_key_tile(t, g, a.d, k0, tid);
    __syncthreads();
    probs_and_grads(nullptr, sdS, t, a.d, q0, k0, tid);
    __syncthreads();
    for (int e = tid; e < tile; e += kThreads) {  // element (query r, channel d), always the same thread's
      const int r = e / hs, d = e - r * hs;
      float dq = sdQ[e];
      for (int c = 0; c < kTile; ++c) dq = fmaf(sdS[r * kTile + c], t.k[c * hs + d], dq);
      sdQ[e] = dq;
    }
  }
  __syncthreads();
  const int64_t ld = 3 * a.d.C;
  store_rows(g.dq + q0 * ld, ld, sdQ, hs, a.d.T - q0, a.d.scale, a.accumulate, tid);
}

// Opts a kernel into `bytes` of dynamic shared memory when it needs more than the default 48 KiB.
template <class K>
Status allow_smem(K* kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    ZW_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  }
  return Status();
}

dim3 grid_of(const Dims& d) { return dim3(unsigned(d.B * d.NH), unsigned((d.T + kTile - 1) / kTile)); }

template <class E>
Status forward(const FwdArgs& a, cudaStream_t stream) {
  const size_t smem = (size_t(4 * kTile) * a.d.hs + kTile * kTile + 3 * kTile) * sizeof(float);
  ZW_TRY(allow_smem(generic_fwd_kernel<E>, smem));
  generic_fwd_kernel<E><<<grid_of(a.d), kThreads, smem, stream>>>(a);
  ZW_CUDA_LAUNCH_TRY("attention_forward (generic kernel)");
  return Status();
}

template <class E>
Status backward(const BwdArgs& a, cudaStream_t stream) {
  const size_t tile = size_t(kTile) * a.d.hs;
  const size_t smem_kv = (6 * tile + 2 * kTile + 2 * kTile * kTile) * sizeof(float);
  const size_t smem_q = (5 * tile + 2 * kTile + kTile * kTile) * sizeof(float);
  ZW_TRY(allow_smem(generic_bwd_dkdv_kernel<E>, smem_kv));
  generic_bwd_dkdv_kernel<E><<<grid_of(a.d), kThreads, smem_kv, stream>>>(a);
  ZW_CUDA_LAUNCH_TRY("attention_backward (generic dK/dV kernel)");
  ZW_TRY(allow_smem(generic_bwd_dq_kernel<E>, smem_q));
  generic_bwd_dq_kernel<E><<<grid_of(a.d), kThreads, smem_q, stream>>>(a);
  ZW_CUDA_LAUNCH_TRY("attention_backward (generic dQ kernel)");
  return Status();
}

}  // namespace

Status generic_forward(DataType dtype, const FwdArgs& a, cudaStream_t stream) {
  return dispatch_dtype("attention_forward", dtype,
                        [&](auto e) { return forward<typename decltype(e)::type>(a, stream); });
}

Status generic_backward(DataType dtype, const BwdArgs& a, cudaStream_t stream) {
  return dispatch_dtype("attention_backward", dtype,
                        [&](auto e) { return backward<typename decltype(e)::type>(a, stream); });
}

}  // namespace zw::tensor::cuda::attn
