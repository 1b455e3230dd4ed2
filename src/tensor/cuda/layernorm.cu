// tensor/cuda/layernorm.cu — layer normalization forward on CUDA, optionally fused with the residual add that
// produces its input (the backward is layernorm_backward.cu; the row layout both share is layernorm_rows.cuh).
//
// Statistics are two-pass in f32 (mean, then the centred variance) as the CPU computes them, summed in a fixed order
// (layernorm_rows.cuh), so the bits do not change between runs. residual_layernorm_forward rounds res = a + b to the
// storage dtype, stores it, and normalizes those rounded values (what a separate residual_forward + layernorm_forward
// would compute), in one kernel. Non-goals: RMSNorm.
#include <cstdint>
#include <string>

#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/layernorm_rows.cuh"

namespace zw::tensor::cuda {
namespace {

using namespace layernorm_rows;  // NOLINT(google-build-using-namespace): the kernels' shared layout

constexpr float kEps = float(kLayerNormEps);

// Forward, register-resident row: J packs per lane, pack p = lane + 32·j.
template <class T, int J, bool kResidual>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_packed(T* out, float* mean, float* rstd, T* res, const T* a, const T* b, const T* weight,
                             const T* bias, int64_t N, int C) {
  constexpr int P = kPack<T>;
  const int lane = int(threadIdx.x % 32);
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;  // the whole warp
  const int npacks = C / P;
  const int64_t off = row * C;
  float x[J][P];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int64_t e = off + int64_t{lane + 32 * j} * P;
    if (lane + 32 * j < npacks) {
      load_f32<P>(a + e, x[j]);
      if constexpr (kResidual) {
        float y[P];
        load_f32<P>(b + e, y);
#pragma unroll
        for (int k = 0; k < P; ++k) x[j][k] = round_to<T>(x[j][k] + y[k]);
        store_f32<P>(res + e, x[j]);
      }
#pragma unroll
      for (int k = 0; k < P; ++k) sum += x[j][k];
    }
  }
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    if (lane + 32 * j < npacks) {
#pragma unroll
      for (int k = 0; k < P; ++k) var += (x[j][k] - m) * (x[j][k] - m);
    }
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / float(C) + kEps);
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = (lane + 32 * j) * P;
    if (lane + 32 * j < npacks) {
      float w[P], bb[P], y[P];
      load_f32<P>(weight + c, w);
      load_f32<P>(bias + c, bb);
#pragma unroll
      for (int k = 0; k < P; ++k) y[k] = (x[j][k] - m) * s * w[k] + bb[k];
      store_f32<P>(out + off + c, y);
    }
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// Forward, any C: three lane-strided passes; with kResidual the first pass writes res and the later ones read it
// back (each lane reads only the elements it wrote itself).
template <class T, bool kResidual>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_rows(T* out, float* mean, float* rstd, T* res, const T* a, const T* b, const T* weight,
                           const T* bias, int64_t N, int64_t C) {
  const int lane = int(threadIdx.x % 32);
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const int64_t off = row * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float v = to_f32(a[off + c]);
    if constexpr (kResidual) {
      v = round_to<T>(v + to_f32(b[off + c]));
      res[off + c] = from_f32<T>(v);
    }
    sum += v;
  }
  const T* x = (kResidual ? res : a) + off;
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
  for (int64_t c = lane; c < C; c += 32) var += (to_f32(x[c]) - m) * (to_f32(x[c]) - m);
  const float s = 1.0f / sqrtf(warp_sum(var) / float(C) + kEps);
  for (int64_t c = lane; c < C; c += 32)
    out[off + c] = from_f32<T>((to_f32(x[c]) - m) * s * to_f32(weight[c]) + to_f32(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <class T, bool kResidual>
Status launch_forward(const char* what, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& res,
                      const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias) {
  const int64_t C = a.shape.last(), N = a.shape.rows();
  const unsigned grid = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  T* r = res.data<T>();
  bool launched = false;
  if (packed_rows<T>(C, {out.mem.ptr, res.mem.ptr, a.mem.ptr, b.mem.ptr, weight.mem.ptr, bias.mem.ptr})) {
    const int need = int((C / kPack<T> + 31) / 32);
    launched = with_packs_per_lane<kPack<T>>(need, [&](auto j) {
      layernorm_forward_packed<T, decltype(j)::value, kResidual>
          <<<grid, kThreads, 0, stream()>>>(out.data<T>(), mean.data<float>(), rstd.data<float>(), r, a.data<T>(),
                                            b.data<T>(), weight.data<T>(), bias.data<T>(), N, int(C));
    });
  }
  if (!launched)
    layernorm_forward_rows<T, kResidual>
        <<<grid, kThreads, 0, stream()>>>(out.data<T>(), mean.data<float>(), rstd.data<float>(), r, a.data<T>(),
                                          b.data<T>(), weight.data<T>(), bias.data<T>(), N, C);
  ZW_CUDA_LAUNCH_TRY(what);
  return Status();
}

}  // namespace

Status layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias) {
  if (inp.shape.rows() == 0 || inp.shape.last() == 0) return Status();
  return dispatch_dtype("layernorm_forward", inp.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return launch_forward<T, false>("layernorm_forward kernel", out, mean, rstd, Tensor{}, inp, Tensor{}, weight, bias);
  });
}

Status residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias) {
  if (a.shape.rows() == 0 || a.shape.last() == 0) return Status();
  return dispatch_dtype("residual_layernorm_forward", a.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return launch_forward<T, true>("residual_layernorm_forward kernel", out, mean, rstd, res, a, b, weight, bias);
  });
}

}  // namespace zw::tensor::cuda
