// tensor/cuda/embedding.cu — token + position embedding on CUDA: the forward lookup and the deterministic
// backward (positions sorted by token, each token's gradient rows summed by one thread per channel group).
//
// Forward: one thread per (position, channel group of K), grid-stride; K = one 16-byte pack when C is a multiple
// of the pack width and the tensors are 16-byte aligned, else 1. A token outside [0, V) is recorded in the
// context's error slot (first writer wins) and its output row is written as zeros.
// Backward, with n = B·T positions:
//  - dwpe[t,:] += Σ_b dout[b,t,:], one thread per (t, channel group) summing b = 0..B-1 in order.
//  - dwte: keys[i] = tokens[i] (V for a bad id) and values[i] = i are radix-sorted (cub, stable: equal tokens keep
//    position order). One warp-sized block per sorted index and channel block; a block whose index does not start
//    a run of equal keys (or whose key is the bad-id sentinel) exits at once; a run start's block walks its run in
//    sorted order, summing dout rows into registers, and adds the total once into dwte[token,:]. Every dwte element
//    thus has one writer and a fixed summation order: no atomics, the same bits on every run.
// Scratch: keys in/out and values in/out (4·n int32) and cub's temporary storage, 256-byte aligned pieces.
// Non-goals: splitting very long runs of one token over several blocks (a run is summed by one warp per 32
// channel groups; a token filling all 32768 positions is correct, only slower).
#include <cstdint>
#include <cub/cub.cuh>
#include <string>

#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/dtype.cuh"

namespace zw::tensor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsInFlight = 8;  // dout rows a run walker loads before adding them (latency hiding)

// Calls fn(row, c) for every row in [0, rows) and every c in [0, C) that is a multiple of K: the (row, c) pairs in
// row-major order, grid-stride over the kernel's threads.
template <int K, class Fn>
__device__ __forceinline__ void for_each_group(int64_t rows, int64_t C, Fn&& fn) {
  const int64_t groups = C / K;
  const int64_t total = rows * groups;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t u = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; u < total; u += stride) {
    const int64_t row = u / groups;
    fn(row, (u - row * groups) * K);
  }
}

template <class T, int K>
__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t n, int64_t T_len,
                             int64_t C, int64_t V, DeviceError* err) {
  for_each_group<K>(n, C, [&](int64_t pos, int64_t c) {
    const int32_t tok = tokens[pos];
    float v[K];
    if (tok >= 0 && tok < V) {
      float p[K];
      load_f32<K>(wte + int64_t{tok} * C + c, v);
      load_f32<K>(wpe + (pos % T_len) * C + c, p);
#pragma unroll
      for (int j = 0; j < K; ++j) v[j] += p[j];
    } else {
#pragma unroll
      for (int j = 0; j < K; ++j) v[j] = 0.0f;
      if (c == 0) record_error(err, kDeviceErrorTokenOutOfRange, pos, tok, V);
    }
    store_f32<K>(out + pos * C + c, v);
  });
}

// dwpe[t, c..c+K) += Σ_b dout[b, t, c..c+K), b in order.
template <class T, int K>
__global__ void __launch_bounds__(kThreads)
    embedding_dwpe_kernel(float* dwpe, const T* dout, int64_t B, int64_t T_len, int64_t C) {
  for_each_group<K>(T_len, C, [&](int64_t t, int64_t c) {
    float acc[K] = {};
#pragma unroll 4
    for (int64_t b = 0; b < B; ++b) {
      float d[K];
      load_f32<K>(dout + (b * T_len + t) * C + c, d);
#pragma unroll
      for (int j = 0; j < K; ++j) acc[j] += d[j];
    }
    float g[K];
    load_f32<K>(dwpe + t * C + c, g);
#pragma unroll
    for (int j = 0; j < K; ++j) g[j] += acc[j];
    store_f32<K>(dwpe + t * C + c, g);
  });
}

// keys[i] = tokens[i], or V (sorts last, skipped) for an id outside [0, V), which is recorded; values[i] = i.
__global__ void __launch_bounds__(kThreads)
    embedding_sort_input_kernel(uint32_t* keys, int32_t* values, const int32_t* tokens, int n, int64_t V,
                                DeviceError* err) {
  const int stride = int(gridDim.x * blockDim.x);
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += stride) {
    const int32_t tok = tokens[i];
    const bool ok = tok >= 0 && tok < V;
    if (!ok) record_error(err, kDeviceErrorTokenOutOfRange, i, tok, V);
    keys[i] = ok ? uint32_t(tok) : uint32_t(V);
    values[i] = i;
  }
}

// Block (32 threads) = (sorted index blockIdx.x, channel groups blockIdx.y·32 + lane). See the file comment.
template <class T, int K>
__global__ void __launch_bounds__(32) embedding_dwte_kernel(float* dwte, const T* dout, const uint32_t* keys,
                                                            const int32_t* positions, int n, int64_t C, int64_t V) {
  const int start = int(blockIdx.x);
  const uint32_t tok = keys[start];
  if (tok >= V || (start > 0 && keys[start - 1] == tok)) return;  // uniform over the block
  const int lane = int(threadIdx.x);
  const int64_t c = (int64_t{blockIdx.y} * 32 + lane) * K;
  const bool active = c < C;  // inactive lanes still take part in the warp's ballots and shuffles
  float acc[K] = {};
  for (int base = start;; base += 32) {
    // The next 32 sorted entries: which still belong to the run (a prefix of the lanes), and their positions.
    const int j = base + lane;
    const bool in_run = j < n && keys[j] == tok;
    const int32_t my_pos = in_run ? positions[j] : 0;
    const int count = __popc(__ballot_sync(0xffffffffu, in_run));
    for (int r = 0; r < count; r += kRowsInFlight) {
      float rows[kRowsInFlight][K] = {};
#pragma unroll
      for (int q = 0; q < kRowsInFlight; ++q) {
        const int src = r + q < count ? r + q : 0;
        const int64_t pos = __shfl_sync(0xffffffffu, my_pos, src);
        if (active && r + q < count) load_f32<K>(dout + pos * C + c, rows[q]);
      }
#pragma unroll
      for (int q = 0; q < kRowsInFlight; ++q) {
        if (r + q < count) {
#pragma unroll
          for (int k = 0; k < K; ++k) acc[k] += rows[q][k];
        }
      }
    }
    if (count < 32) break;
  }
  if (!active) return;
  float g[K];
  float* row = dwte + int64_t{tok} * C + c;
  load_f32<K>(row, g);
#pragma unroll
  for (int k = 0; k < K; ++k) g[k] += acc[k];
  store_f32<K>(row, g);
}

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

// Bits that hold every key in [0, V] (V itself is the bad-id sentinel).
int key_bits(int64_t V) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= V) ++bits;
  return bits;
}

// Sorts the positions by token in the context scratch, then sums each token's rows into dwte.
template <class T>
Status embedding_dwte(const Tensor& dwte, const Tensor& dout, const Tensor& tokens, int n, int64_t C, bool packed) {
  CudaContext::Impl& ctx = current();
  const int64_t V = dwte.shape[0];
  const int bits = key_bits(V);
  const size_t array = align256(size_t(n) * sizeof(int32_t));
  size_t temp = 0;
  ZW_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const uint32_t*>(nullptr),
                                              static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                              static_cast<int32_t*>(nullptr), n, 0, bits, ctx.stream));
  const size_t need = 4 * array + align256(temp);
  if (need > ctx.scratch_bytes)
    return Status(Code::kInvalidArgument,
                  "embedding_backward: sorting " + std::to_string(n) + " positions needs " + std::to_string(need) +
                      " bytes of CUDA context scratch, the context has " + std::to_string(ctx.scratch_bytes) +
                      "; create it with CudaContextOptions::scratch_bytes >= " + std::to_string(need));
  auto* base = static_cast<char*>(ctx.scratch);
  auto* keys_in = reinterpret_cast<uint32_t*>(base);
  auto* keys_out = reinterpret_cast<uint32_t*>(base + array);
  auto* vals_in = reinterpret_cast<int32_t*>(base + 2 * array);
  auto* vals_out = reinterpret_cast<int32_t*>(base + 3 * array);
  void* cub_temp = base + 4 * array;
  embedding_sort_input_kernel<<<grid_for(n, kThreads), kThreads, 0, ctx.stream>>>(
      keys_in, vals_in, tokens.data<int32_t>(), n, V, ctx.error_device);
  ZW_CUDA_LAUNCH_TRY("embedding_backward: sort input kernel");
  ZW_CUDA_TRY(
      cub::DeviceRadixSort::SortPairs(cub_temp, temp, keys_in, keys_out, vals_in, vals_out, n, 0, bits, ctx.stream));
  const int64_t groups = C / (packed ? kPack<T> : 1);
  const dim3 grid{unsigned(n), unsigned((groups + 31) / 32)};
  if (packed) {
    embedding_dwte_kernel<T, kPack<T>>
        <<<grid, 32, 0, ctx.stream>>>(dwte.data<float>(), dout.data<T>(), keys_out, vals_out, n, C, V);
  } else {
    embedding_dwte_kernel<T, 1>
        <<<grid, 32, 0, ctx.stream>>>(dwte.data<float>(), dout.data<T>(), keys_out, vals_out, n, C, V);
  }
  ZW_CUDA_LAUNCH_TRY("embedding_backward: dwte kernel");
  return Status();
}

}  // namespace

Status embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const int64_t B = tokens.shape[0], T_len = tokens.shape[1], V = wte.shape[0], C = wte.shape[1];
  const int64_t n = B * T_len;
  if (n == 0 || C == 0) return Status();
  return dispatch_dtype("embedding_forward", out.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const bool packed = C % kPack<T> == 0 && aligned16(out.mem.ptr) && aligned16(wte.mem.ptr) && aligned16(wpe.mem.ptr);
    const int K = packed ? kPack<T> : 1;
    const unsigned grid = grid_for(n * (C / K), kThreads);
    DeviceError* err = current().error_device;
    if (packed) {
      embedding_forward_kernel<T, kPack<T>><<<grid, kThreads, 0, stream()>>>(
          out.data<T>(), tokens.data<int32_t>(), wte.data<T>(), wpe.data<T>(), n, T_len, C, V, err);
    } else {
      embedding_forward_kernel<T, 1><<<grid, kThreads, 0, stream()>>>(
          out.data<T>(), tokens.data<int32_t>(), wte.data<T>(), wpe.data<T>(), n, T_len, C, V, err);
    }
    ZW_CUDA_LAUNCH_TRY("embedding_forward kernel");
    return Status();
  });
}

Status embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  const int64_t B = dout.shape[0], T_len = dout.shape[1], C = dout.shape[2];
  const int64_t n = B * T_len;
  if (n == 0 || C == 0 || (!dwte.defined() && !dwpe.defined())) return Status();
  if (n > INT32_MAX)
    return Status(Code::kInvalidArgument, "embedding_backward: " + std::to_string(n) +
                                              " positions; the CUDA path "
                                              "sorts at most 2^31 - 1");
  return dispatch_dtype("embedding_backward", dout.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const bool packed =
        C % kPack<T> == 0 && aligned16(dout.mem.ptr) && aligned16(dwte.mem.ptr) && aligned16(dwpe.mem.ptr);
    if (dwpe.defined()) {
      const int K = packed ? kPack<T> : 1;
      const unsigned grid = grid_for(T_len * (C / K), kThreads);
      if (packed) {
        embedding_dwpe_kernel<T, kPack<T>>
            <<<grid, kThreads, 0, stream()>>>(dwpe.data<float>(), dout.data<T>(), B, T_len, C);
      } else {
        embedding_dwpe_kernel<T, 1><<<grid, kThreads, 0, stream()>>>(dwpe.data<float>(), dout.data<T>(), B, T_len, C);
      }
      ZW_CUDA_LAUNCH_TRY("embedding_backward: dwpe kernel");
    }
    if (dwte.defined()) ZW_TRY(embedding_dwte<T>(dwte, dout, tokens, int(n), C, packed));
    return Status();
  });
}

}  // namespace zw::tensor::cuda
