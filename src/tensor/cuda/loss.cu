// tensor/cuda/loss.cu — fused softmax + cross-entropy over the vocabulary on CUDA: forward, backward, and the
// classifier's forward+backward that writes the gradient over the logits.
//
// One 512-thread block per row. A thread walks its share of the row in K-wide units (one 16-byte pack when V is a
// multiple of the pack width and the tensors are 16-byte aligned, else single elements), keeping an online
// (max, Σ exp(x - max)) in f32; the pairs are combined over the warp by a butterfly and over the warps in warp
// order, so the statistics have the same bits on every run. A row is read at most twice: once for the statistics
// (and logits[target], read by thread 0 before the block's first barrier), once to write probabilities or
// gradients — from global memory both times (LossRows::kTwoPass), or the second time from the copy the first pass
// left in shared memory (kStaged: one read of the logits from global memory instead of two; for rows of at most half
// an SM's shared memory, so that two blocks still fit on an SM — GPT-2's 50,304 bf16 logits take 98 KiB). Each
// thread reads back only the units it staged, and the arithmetic is the same, so both give the same bits. Every
// element is rewritten by the thread that read it after the barrier, so the output may be the row's own memory
// (probs over logits, dlogits over probs or logits). loss = log Σ + max - logits[target], as the
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

// The row's (max, Σ exp(x - max)) over the whole block; every thread gets the same value. Contains barriers. With
// kStage, each thread also copies the units it reads into stage (exactly: T -> f32 -> T is the identity).
template <int K, bool kStage, class T>
__device__ MaxSum block_max_sum(const T* z, int64_t V, T* stage) {
  __shared__ MaxSum warp_part[kWarps];
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t u = threadIdx.x; u < V / K; u += kThreads) {
    float x[K];
    load_f32<K>(z + u * K, x);
    if constexpr (kStage) store_f32<K>(stage + u * K, x);
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
// onehot(target)), 0 for an invalid target. out may be the logits. kStaged: the second pass reads the row from
// dynamic shared memory of V elements, which the first pass filled.
template <class T, int K, bool kGrad, bool kStaged>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_softmax_kernel(float* losses, T* out, const T* logits, const int32_t* targets, int64_t V, float scale,
                                 DeviceError* err) {
  extern __shared__ __align__(16) unsigned char staged_row[];
  const int64_t row = blockIdx.x;
  const T* z = logits + row * V;
  const int32_t tgt = targets[row];
  const bool valid = check_target(tgt, row, V, err);
  const float zt = valid && threadIdx.x == 0 ? to_f32(z[tgt]) : 0.0f;  // before the barrier: out may be z
  T* stage = kStaged ? reinterpret_cast<T*>(staged_row) : nullptr;
  const MaxSum ms = block_max_sum<K, kStaged>(z, V, stage);
  if (threadIdx.x == 0) losses[row] = valid ? logf(ms.s) + ms.m - zt : 0.0f;
  const float inv = 1.0f / ms.s;
  const T* src = kStaged ? stage : z;
  T* o = out + row * V;
  for (int64_t u = threadIdx.x; u < V / K; u += kThreads) {
    float x[K];
    load_f32<K>(src + u * K, x);
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

// Dynamic shared memory for a staged row of `row_bytes`, or 0 when the context reads rows twice or the row takes
// more than half the SM's shared memory (less the per-block reservation and the kernel's own 128 bytes).
size_t staged_bytes(const CudaContext::Impl& ctx, size_t row_bytes) {
  if (ctx.loss_rows != LossRows::kStaged) return 0;
  constexpr size_t kPerBlockReserve = 1024 + kWarps * sizeof(MaxSum);
  const size_t half = size_t(ctx.smem_per_sm) / 2;
  return half > kPerBlockReserve && row_bytes <= half - kPerBlockReserve ? row_bytes : 0;
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
    const CudaContext::Impl& ctx = current();
    const size_t smem = staged_bytes(ctx, size_t(V) * sizeof(T));
    auto launch = [&](auto k, auto staged) -> Status {
      auto* kernel = cross_entropy_softmax_kernel<T, decltype(k)::value, kGrad, decltype(staged)::value>;
      if (smem > 48 * 1024)
        ZW_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      kernel<<<unsigned(N), kThreads, smem, stream()>>>(losses.data<float>(), out.data<T>(), logits.data<T>(),
                                                        targets.data<int32_t>(), V, scale, ctx.error_device);
      ZW_CUDA_LAUNCH_TRY(kGrad ? "cross_entropy_forward_backward kernel" : "cross_entropy_forward kernel");
      return Status();
    };
    using Packed = std::integral_constant<int, kPack<T>>;
    using Single = std::integral_constant<int, 1>;
    const bool packed = packed_rows<T>(V, logits.mem.ptr, out.mem.ptr);
    if (smem > 0) return packed ? launch(Packed{}, std::true_type{}) : launch(Single{}, std::true_type{});
    return packed ? launch(Packed{}, std::false_type{}) : launch(Single{}, std::false_type{});
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
