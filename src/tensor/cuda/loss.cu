// tensor/cuda/loss.cu — fused softmax + cross-entropy over the vocabulary on CUDA: forward, backward, and the
// classifier's forward+backward that writes the gradient over the logits.
//
// One 512-thread block per row. A thread walks its share of the row in K-wide units (one 16-byte pack when V is a
// multiple of the pack width and the tensors are 16-byte aligned, else single elements), keeping an online
// (max, Σ exp(x - max)) in f32; the pairs are combined over the warp by a butterfly and over the warps in warp
// order, so the statistics have the same bits on every run. A row is read at most twice: once for the statistics
// (and logits[target], read by thread 0 before the block's first barrier), once to write probabilities or
// gradients. Every element is rewritten by the thread that read it after the barrier, so the output may be the
// row's own memory (probs over logits, dlogits over probs or logits). loss = log Σ + max - logits[target], as the
// CPU computes it. A target outside [0, V) is recorded in the context's error slot (first writer wins); its row
// gets loss 0 and a zero gradient (accumulate: unchanged).
// Non-goals: ignore_index, label smoothing, splitting a row over several blocks.
#include <cstdint>
#include <string>
#include <type_traits>

#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/dtype.cuh"

namespace zw::tensor::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

struct MaxSum {
  float m;  // running max (-inf before any element)
  float s;  // Σ exp(x - m)
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return MaxSum{m, 0.0f};
  return MaxSum{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// The row's (max, Σ exp(x - max)) over the whole block; every thread gets the same value. Contains barriers.
template <int K, class T>
__device__ MaxSum block_max_sum(const T* z, int64_t V) {
  __shared__ MaxSum warp_part[kWarps];
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t u = threadIdx.x; u < V / K; u += kThreads) {
    float x[K];
    load_f32<K>(z + u * K, x);
    float mx = x[0];
#pragma unroll
    for (int k = 1; k < K; ++k) mx = fmaxf(mx, x[k]);
    const float m = fmaxf(acc.m, mx);
    float s = acc.m == -INFINITY ? 0.0f : acc.s * expf(acc.m - m);
#pragma unroll
    for (int k = 0; k < K; ++k) s += expf(x[k] - m);
    acc = MaxSum{m, s};
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.s, o)};
    acc = combine(acc, other);
  }
  if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = acc;
  __syncthreads();
  MaxSum total = warp_part[0];
  for (int w = 1; w < kWarps; ++w) total = combine(total, warp_part[w]);
  return total;
}

// Whether the row's target is in [0, V); thread 0 records a bad one in the error slot.
__device__ __forceinline__ bool check_target(int32_t tgt, int64_t row, int64_t V, DeviceError* err) {
  const bool valid = tgt >= 0 && tgt < V;
  if (!valid && threadIdx.x == 0) record_error(err, kDeviceErrorTargetOutOfRange, row, tgt, V);
  return valid;
}

// losses[row] = log Σ exp(z - max) + max - z[target] (0 for an invalid target), then over the row out = softmax(z)
// (forward: the probabilities) or, with kGrad (the classifier's forward+backward), out = scale·(softmax(z) -
// onehot(target)), 0 for an invalid target. out may be the logits.
template <class T, int K, bool kGrad>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_softmax_kernel(float* losses, T* out, const T* logits, const int32_t* targets, int64_t V, float scale,
                                 DeviceError* err) {
  const int64_t row = blockIdx.x;
  const T* z = logits + row * V;
  const int32_t tgt = targets[row];
  const bool valid = check_target(tgt, row, V, err);
  const float zt = valid && threadIdx.x == 0 ? to_f32(z[tgt]) : 0.0f;  // before the barrier: out may be z
  const MaxSum ms = block_max_sum<K>(z, V);
  if (threadIdx.x == 0) losses[row] = valid ? logf(ms.s) + ms.m - zt : 0.0f;
  const float inv = 1.0f / ms.s;
  T* o = out + row * V;
  for (int64_t u = threadIdx.x; u < V / K; u += kThreads) {
    float x[K];
    load_f32<K>(z + u * K, x);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if constexpr (kGrad)
        x[k] = valid ? scale * (expf(x[k] - ms.m) * inv - (u * K + k == tgt ? 1.0f : 0.0f)) : 0.0f;
      else
        x[k] = expf(x[k] - ms.m) * inv;
    }
    store_f32<K>(o + u * K, x);
  }
}

// dlogits [+]= scale·(probs - onehot(target)); dlogits may be probs (then kAccumulate is false).
template <class T, int K, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(T* dlogits, const T* probs, const int32_t* targets, int64_t V, float scale,
                                  DeviceError* err) {
  const int64_t row = blockIdx.x;
  const int32_t tgt = targets[row];
  const bool valid = check_target(tgt, row, V, err);
  const T* p = probs + row * V;
  T* d = dlogits + row * V;
  for (int64_t u = threadIdx.x; u < V / K; u += kThreads) {
    float g[K];
    if (valid) {
      load_f32<K>(p + u * K, g);
#pragma unroll
      for (int k = 0; k < K; ++k) g[k] = scale * (g[k] - (u * K + k == tgt ? 1.0f : 0.0f));
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) g[k] = 0.0f;
    }
    if constexpr (kAccumulate) {
      float prev[K];
      load_f32<K>(d + u * K, prev);
#pragma unroll
      for (int k = 0; k < K; ++k) g[k] = prev[k] + g[k];
    }
    store_f32<K>(d + u * K, g);
  }
}

// One block per row: the grid holds at most 2^31 - 1 of them.
Status check_rows(const char* op, int64_t N) {
  if (N <= INT32_MAX) return Status();
  return Status(Code::kInvalidArgument, std::string(op) + ": " + std::to_string(N) +
                                            " rows; the CUDA path takes at "
                                            "most 2^31 - 1 per call (split the batch)");
}

// Whether rows of V elements of T at these addresses take the 16-byte path.
template <class T>
bool packed_rows(int64_t V, const void* a, const void* b) {
  return V % kPack<T> == 0 && aligned16(a) && aligned16(b);
}

// The forward (kGrad: forward+backward) of `op`: one cross_entropy_softmax_kernel block per row of logits.
template <bool kGrad>
Status softmax_rows(const char* op, const Tensor& losses, const Tensor& out, const Tensor& logits,
                    const Tensor& targets, float scale) {
  const int64_t N = logits.shape.rows(), V = logits.shape.last();
  if (N == 0) return Status();
  ZW_TRY(check_rows(op, N));
  return dispatch_dtype(op, logits.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    DeviceError* err = current().error_device;
    const unsigned grid = unsigned(N);
    if (packed_rows<T>(V, logits.mem.ptr, out.mem.ptr)) {
      cross_entropy_softmax_kernel<T, kPack<T>, kGrad><<<grid, kThreads, 0, stream()>>>(
          losses.data<float>(), out.data<T>(), logits.data<T>(), targets.data<int32_t>(), V, scale, err);
    } else {
      cross_entropy_softmax_kernel<T, 1, kGrad><<<grid, kThreads, 0, stream()>>>(
          losses.data<float>(), out.data<T>(), logits.data<T>(), targets.data<int32_t>(), V, scale, err);
    }
    ZW_CUDA_LAUNCH_TRY(kGrad ? "cross_entropy_forward_backward kernel" : "cross_entropy_forward kernel");
    return Status();
  });
}

}  // namespace

Status cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets) {
  return softmax_rows<false>("cross_entropy_forward", losses, probs, logits, targets, 1.0f);
}

Status cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              double dloss_per_position, GradInit init) {
  const int64_t N = probs.shape.rows(), V = probs.shape.last();
  if (N == 0 || V == 0) return Status();
  ZW_TRY(check_rows("cross_entropy_backward", N));
  return dispatch_dtype("cross_entropy_backward", probs.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    DeviceError* err = current().error_device;
    const unsigned grid = unsigned(N);
    const float scale = float(dloss_per_position);
    const bool packed = packed_rows<T>(V, dlogits.mem.ptr, probs.mem.ptr);
    auto launch = [&](auto k, auto acc) {
      cross_entropy_backward_kernel<T, decltype(k)::value, decltype(acc)::value>
          <<<grid, kThreads, 0, stream()>>>(dlogits.data<T>(), probs.data<T>(), targets.data<int32_t>(), V, scale, err);
    };
    using Packed = std::integral_constant<int, kPack<T>>;
    using Single = std::integral_constant<int, 1>;
    if (init == GradInit::kOverwrite && packed) {
      launch(Packed{}, std::false_type{});
    } else if (init == GradInit::kOverwrite) {
      launch(Single{}, std::false_type{});
    } else if (packed) {
      launch(Packed{}, std::true_type{});
    } else {
      launch(Single{}, std::true_type{});
    }
    ZW_CUDA_LAUNCH_TRY("cross_entropy_backward kernel");
    return Status();
  });
}

Status cross_entropy_forward_backward(const Tensor& losses, const Tensor& dlogits, const Tensor& logits,
                                      const Tensor& targets, double dloss_per_position) {
  return softmax_rows<true>("cross_entropy_forward_backward", losses, dlogits, logits, targets,
                            float(dloss_per_position));
}

}  // namespace zw::tensor::cuda
