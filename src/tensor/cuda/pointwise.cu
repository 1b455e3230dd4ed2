// tensor/cuda/pointwise.cu — GELU (tanh approximation) and the residual add, forward and backward, on CUDA.
//
// One grid-stride kernel maps up to three same-shaped inputs to one output element by element (f32 arithmetic,
// one rounding on store). When every pointer is 16-byte aligned each thread moves whole 16-byte packs and the
// last numel % pack elements run one at a time; otherwise every element runs one at a time. Each output element
// is read (accumulate) and written by one thread only, so results are deterministic and an output may be the
// very memory of an input of the same index. GELU uses the f32 form of ops_vec.cc: x / (1 + exp(-2u)), with the
// exponent's argument clamped to [-87, 88] as there.
// Non-goals: fusing GELU into the matmul epilogue, broadcasting.
#include <cstdint>

#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/dtype.cuh"

namespace zw::tensor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// exp(-2u) with the argument clamped as ops_vec.cc's vexp clamps it (keeps e finite, so e·s below is not inf·0).
__device__ __forceinline__ float gelu_exp(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return expf(fminf(fmaxf(-2.0f * u, -87.0f), 88.0f));
}

// The element functions: out = f(a, b, c) over kIn inputs (the unused ones are not read).
struct GeluForward {
  static constexpr int kIn = 1;
  __device__ float operator()(float x, float, float) const { return x / (1.0f + gelu_exp(x)); }
};

// dinp = [prev +] dout · gelu'(x); with s = 1/(1 + e): gelu' = s·(1 + 2x·(e·s)·u') (ops_vec.cc).
template <bool kAccumulate>
struct GeluBackward {
  static constexpr int kIn = kAccumulate ? 3 : 2;
  __device__ float operator()(float x, float dy, float prev) const {
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const float e = gelu_exp(x);
    const float s = 1.0f / (1.0f + e);
    const float es = e * s;
    const float g = dy * (s * (1.0f + 2.0f * x * es * du));
    return kAccumulate ? prev + g : g;
  }
};

struct Add {
  static constexpr int kIn = 2;
  __device__ float operator()(float a, float b, float) const { return a + b; }
};

// Elements [i, i + K) of the map.
template <int K, class Op, class T>
__device__ __forceinline__ void map_at(const Op& op, T* out, const T* a, const T* b, const T* c, int64_t i) {
  float x[K], y[K] = {}, z[K] = {}, r[K];
  load_f32<K>(a + i, x);
  if constexpr (Op::kIn >= 2) load_f32<K>(b + i, y);
  if constexpr (Op::kIn >= 3) load_f32<K>(c + i, z);
#pragma unroll
  for (int j = 0; j < K; ++j) r[j] = op(x[j], y[j], z[j]);
  store_f32<K>(out + i, r);
}

// out[i] = op(a[i], b[i], c[i]) for i < n. packed: all pointers 16-byte aligned.
template <class T, class Op>
__global__ void __launch_bounds__(kThreads)
    map_kernel(Op op, T* out, const T* a, const T* b, const T* c, int64_t n, bool packed) {
  constexpr int P = kPack<T>;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (packed) {
    const int64_t npacks = n / P;
    for (int64_t v = tid; v < npacks; v += stride) map_at<P>(op, out, a, b, c, v * P);
    done = npacks * P;
  }
  for (int64_t i = done + tid; i < n; i += stride) map_at<1>(op, out, a, b, c, i);
}

// Launches map_kernel over out.numel() elements; b/c may be undefined when Op does not read them.
template <class Op>
Status launch_map(const char* what, Op op, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c) {
  const int64_t n = out.numel();
  if (n == 0) return Status();
  return dispatch_dtype(what, out.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const bool packed = aligned16(out.mem.ptr) && aligned16(a.mem.ptr) && aligned16(b.mem.ptr) && aligned16(c.mem.ptr);
    const int64_t units = packed ? n / kPack<T> + n % kPack<T> : n;
    map_kernel<T, Op><<<grid_for(units, kThreads), kThreads, 0, stream()>>>(op, out.data<T>(), a.data<T>(), b.data<T>(),
                                                                            c.data<T>(), n, packed);
    ZW_CUDA_LAUNCH_TRY(what);
    return Status();
  });
}

}  // namespace

Status gelu_forward(const Tensor& out, const Tensor& inp) {
  return launch_map("gelu_forward", GeluForward{}, out, inp, Tensor{}, Tensor{});
}

Status gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, GradInit init) {
  if (init == GradInit::kOverwrite)
    return launch_map("gelu_backward", GeluBackward<false>{}, dinp, inp, dout, Tensor{});
  return launch_map("gelu_backward", GeluBackward<true>{}, dinp, inp, dout, dinp);
}

Status residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  return launch_map("residual_forward", Add{}, out, a, b, Tensor{});
}

Status residual_backward(const Tensor& da, const Tensor& db, const Tensor& dout, GradInit init) {
  for (const Tensor* g : {&da, &db}) {
    if (!g->defined() || g->numel() == 0) continue;
    if (init == GradInit::kOverwrite) {
      ZW_CUDA_TRY(cudaMemcpyAsync(g->mem.ptr, dout.mem.ptr, dout.bytes(), cudaMemcpyDeviceToDevice, stream()));
    } else {
      ZW_TRY(launch_map("residual_backward", Add{}, *g, dout, *g, Tensor{}));
    }
  }
  return Status();
}

}  // namespace zw::tensor::cuda
