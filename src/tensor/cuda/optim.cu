// tensor/cuda/optim.cu — the optimizer's device kernels: reduce_sum (the loss and the squared gradient norm),
// grad_factor (unscale × clip, without a host round trip) and FlatAdamW's multi-tensor AdamW step.
//
// This file is built with -fmad=false (src/tensor/CMakeLists.txt): every multiply and add rounds on its own as on
// the host, and with nvcc's default IEEE division and square root the AdamW update and the gradient factor are
// bit-identical to adamw.cc's scalar reference. From dtype.cuh it uses only the element conversions, 16-byte packs
// and aligned16: no multiply or add that the shared header could bring in.
//  - reduce_sum: stage 1 runs a grid that is a function of numel only (at most kReduceMaxBlocks blocks of 256
//    threads, grid-stride, 16-byte loads when x is 16-byte aligned) and accumulates in f64 — free next to the
//    memory traffic on an H200 and as the CPU path does — with a fixed shared-memory tree per block; the per-block
//    f64 partials go to the context scratch; stage 2, one block, adds them in a fixed order and writes the f32
//    result. Same input, same address alignment → same bits.
//  - AdamW: the DecaySegments are cut on the host into chunks of at most kAdamWChunk elements (offset, count,
//    decay), uploaded once at create; a step is one launch with one 256-thread block per chunk, 16-byte loads and
//    stores where the chunk starts on a multiple of 4 elements of aligned buffers. Bias corrections
//    and decay factors are computed on the host in double exactly as adamw_update does, then passed as f32.
// Non-goals: fused clipping inside the AdamW kernel, f64 parameters, multi-device optimizer state.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/dtype.cuh"

namespace zw::tensor::cuda {

// One entry of the AdamW chunk table (16 bytes).
struct AdamWChunk {
  int64_t offset = 0;  // first element in the flat buffer
  int32_t count = 0;   // elements, 1..kAdamWChunk
  int32_t decay = 0;   // 1: weight decay applies
};

namespace {

// ---- reduce_sum ----

constexpr int kReduceThreads = 256;
constexpr int64_t kReduceMaxBlocks = 2048;   // stage-1 grid cap (and partials count)
constexpr int64_t kReduceMinPerThread = 16;  // elements a stage-1 thread gets at least, before the cap

__device__ inline double term(float x, bool squares) {
  const double d = x;
  return squares ? d * d : d;
}

// Sum of the block's kReduceThreads values in a fixed tree; every thread gets the total.
__device__ double block_sum(double x, double* shared) {
  shared[threadIdx.x] = x;
  __syncthreads();
  for (int width = kReduceThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  return shared[0];
}

// Stage 1: partials[blockIdx.x] = Σ over this block's grid-stride share of x (or of x²).
template <class T>
__global__ void __launch_bounds__(kReduceThreads)
    sum_partials_kernel(double* partials, const T* x, int64_t n, bool squares, bool vectors) {
  __shared__ double shared[kReduceThreads];
  const int64_t stride = int64_t(gridDim.x) * kReduceThreads;
  const int64_t tid = int64_t(blockIdx.x) * kReduceThreads + threadIdx.x;
  double sum = 0.0;
  int64_t scalar_from = 0;
  if (vectors) {
    const int64_t nvec = n / kPack<T>;
    const auto* xv = reinterpret_cast<const Pack<T>*>(x);
    for (int64_t i = tid; i < nvec; i += stride) {
      const Pack<T> r = xv[i];
#pragma unroll
      for (int j = 0; j < kPack<T>; ++j) sum += term(to_f32(r.v[j]), squares);
    }
    scalar_from = nvec * kPack<T>;
  }
  for (int64_t i = scalar_from + tid; i < n; i += stride) sum += term(to_f32(x[i]), squares);
  const double total = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Stage 2 (one block): out[0] = Σ partials[0, count) in a fixed order, rounded once to f32 (0 when count is 0).
__global__ void __launch_bounds__(kReduceThreads) sum_finish_kernel(float* out, const double* partials, int64_t count) {
  __shared__ double shared[kReduceThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kReduceThreads) sum += partials[i];
  const double total = block_sum(sum, shared);
  if (threadIdx.x == 0) out[0] = static_cast<float>(total);
}

template <class T>
void launch_partials(double* partials, const Tensor& x, int64_t n, bool squares, int64_t blocks, cudaStream_t s) {
  const bool vectors = aligned16(x.mem.ptr);
  sum_partials_kernel<T><<<unsigned(blocks), kReduceThreads, 0, s>>>(partials, x.data<T>(), n, squares, vectors);
}

// ---- grad_factor ----

// factor = inv_loss_scale · clip, exactly the double arithmetic of tensor::grad_factor's host path.
__global__ void grad_factor_kernel(float* factor, const float* sumsq, double max_norm, double inv_loss_scale) {
  const double s = sumsq[0];
  if (!isfinite(s)) {
    factor[0] = __int_as_float(0x7fc00000);  // the host's NAN
    return;
  }
  const double norm = sqrt(s) * inv_loss_scale;
  const double clip = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
  factor[0] = static_cast<float>(inv_loss_scale * clip);
}

// ---- AdamW ----

constexpr int kAdamWThreads = 256;
constexpr int64_t kAdamWChunk = 8192;  // elements per chunk (one block each)

// Per-step scalars, computed on the host as adamw_update computes them.
struct AdamWScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float decay_on;   // 1 - lr·wd (decaying chunks; others use 1)
};

enum class Out16 { kNone, kBf16, kF16 };

// One element's update. Every statement mirrors adamw_update in tensor/adamw.cc, operation for operation.
struct AdamWElement {
  float p, g, m, v;
  __device__ void update(const AdamWScalars& s, float factor, float decay_factor) {
    g = g * factor;
    m = s.beta1 * m + s.one_minus_beta1 * g;
    v = s.beta2 * v + s.one_minus_beta2 * g * g;
    const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
    p = p * decay_factor - s.step_size * m / denom;
  }
};

template <Out16 kOut>
__device__ void store16(void* params16, int64_t i, float p) {
  if constexpr (kOut == Out16::kBf16) static_cast<__nv_bfloat16*>(params16)[i] = from_f32<__nv_bfloat16>(p);
  if constexpr (kOut == Out16::kF16) static_cast<__half*>(params16)[i] = from_f32<__half>(p);
}

// Four 16-bit values in one 8-byte store.
template <Out16 kOut>
__device__ void store16x4(void* params16, int64_t i, const float4& p) {
  if constexpr (kOut != Out16::kNone) {
    using T = std::conditional_t<kOut == Out16::kBf16, __nv_bfloat16, __half>;
    union {
      T h[4];
      uint2 u;
    } pack;
    pack.h[0] = from_f32<T>(p.x);
    pack.h[1] = from_f32<T>(p.y);
    pack.h[2] = from_f32<T>(p.z);
    pack.h[3] = from_f32<T>(p.w);
    *reinterpret_cast<uint2*>(static_cast<T*>(params16) + i) = pack.u;
  }
}

// One block per chunk. With `vectors` (every buffer 16-byte aligned), a chunk that starts on a multiple of 4
// elements moves 16 bytes per load and store (the step reads 16 and writes 12–14 bytes per parameter: it is
// bound by memory); the rest, and every chunk without, goes element by element. Same arithmetic either way.
template <Out16 kOut>
__global__ void __launch_bounds__(kAdamWThreads)
    adamw_kernel(const AdamWChunk* chunks, AdamWScalars s, float* params, const float* grads, float* m, float* v,
                 void* params16, const float* grad_factor, bool vectors) {
  const float factor = *grad_factor;
  if (!isfinite(factor)) return;  // fp16 overflow: the caller skips the step, nothing may change
  const AdamWChunk chunk = chunks[blockIdx.x];
  const float decay_factor = chunk.decay != 0 ? s.decay_on : 1.0f;
  int scalar_from = 0;
  if (vectors && chunk.offset % 4 == 0) {
    const int nvec = chunk.count / 4;
    for (int j = threadIdx.x; j < nvec; j += kAdamWThreads) {
      const int64_t i = chunk.offset + 4 * int64_t{j};
      float4 p = *reinterpret_cast<const float4*>(params + i);
      float4 mm = *reinterpret_cast<const float4*>(m + i);
      float4 vv = *reinterpret_cast<const float4*>(v + i);
      const float4 g = *reinterpret_cast<const float4*>(grads + i);
      AdamWElement e[4] = {
          {p.x, g.x, mm.x, vv.x}, {p.y, g.y, mm.y, vv.y}, {p.z, g.z, mm.z, vv.z}, {p.w, g.w, mm.w, vv.w}};
#pragma unroll
      for (AdamWElement& x : e) x.update(s, factor, decay_factor);
      p = make_float4(e[0].p, e[1].p, e[2].p, e[3].p);
      *reinterpret_cast<float4*>(m + i) = make_float4(e[0].m, e[1].m, e[2].m, e[3].m);
      *reinterpret_cast<float4*>(v + i) = make_float4(e[0].v, e[1].v, e[2].v, e[3].v);
      *reinterpret_cast<float4*>(params + i) = p;
      store16x4<kOut>(params16, i, p);
    }
    scalar_from = 4 * nvec;
  }
  for (int j = scalar_from + int(threadIdx.x); j < chunk.count; j += kAdamWThreads) {
    const int64_t i = chunk.offset + j;
    AdamWElement e{params[i], grads[i], m[i], v[i]};
    e.update(s, factor, decay_factor);
    m[i] = e.m;
    v[i] = e.v;
    params[i] = e.p;
    store16<kOut>(params16, i, e.p);
  }
}

}  // namespace

struct AdamWTable {
  AdamWChunk* chunks = nullptr;  // device array
  int64_t num_chunks = 0;
  int device = 0;
};

// ---- reduce_sum ----

Status reduce_sum(const Tensor& out, const Tensor& x, bool squares) {
  CudaContext::Impl& ctx = current();
  const int64_t n = x.numel();
  auto* partials = static_cast<double*>(ctx.scratch);
  int64_t blocks = 0;
  if (n > 0) {
    const int64_t per_block = kReduceThreads * kReduceMinPerThread;
    blocks = std::min(kReduceMaxBlocks, (n + per_block - 1) / per_block);
    const size_t need = size_t(blocks) * sizeof(double);
    if (need > ctx.scratch_bytes)
      return Status(Code::kOutOfMemory, std::string(squares ? "reduce_sum(squares)" : "reduce_sum") + ": needs " +
                                            std::to_string(need) + " bytes of context scratch, the context has " +
                                            std::to_string(ctx.scratch_bytes) +
                                            " (raise CudaContextOptions::scratch_bytes)");
    switch (x.dtype) {
      case DataType::kBFloat16:
        launch_partials<__nv_bfloat16>(partials, x, n, squares, blocks, ctx.stream);
        break;
      case DataType::kFloat16:
        launch_partials<__half>(partials, x, n, squares, blocks, ctx.stream);
        break;
      default:
        launch_partials<float>(partials, x, n, squares, blocks, ctx.stream);
        break;
    }
    ZW_CUDA_LAUNCH_TRY("reduce_sum: partial sums");
  }
  sum_finish_kernel<<<1, kReduceThreads, 0, ctx.stream>>>(out.data<float>(), partials, blocks);
  ZW_CUDA_LAUNCH_TRY("reduce_sum: final sum");
  return Status();
}

// ---- grad_factor ----

Status grad_factor(const Tensor& factor, const Tensor& sumsq, double max_norm, double inv_loss_scale) {
  grad_factor_kernel<<<1, 1, 0, stream()>>>(factor.data<float>(), sumsq.data<float>(), max_norm, inv_loss_scale);
  ZW_CUDA_LAUNCH_TRY("grad_factor");
  return Status();
}

// ---- AdamW ----

// numel is unused: FlatAdamW::create checked the segments against it.
Result<AdamWTable*> create_adamw_table(const std::vector<DecaySegment>& segments, int64_t /*numel*/, int device) {
  std::vector<AdamWChunk> chunks;
  for (const DecaySegment& seg : segments)
    for (int64_t first = 0; first < seg.numel; first += kAdamWChunk)
      chunks.push_back(
          AdamWChunk{seg.offset + first, int32_t(std::min(kAdamWChunk, seg.numel - first)), seg.decay ? 1 : 0});
  if (int64_t(chunks.size()) > int64_t{0x7fffffff})
    return Status(Code::kUnsupported, "adamw: " + std::to_string(chunks.size()) + " chunks of " +
                                          std::to_string(kAdamWChunk) + " elements exceed one launch's grid");
  std::unique_ptr<AdamWTable, void (*)(AdamWTable*)> table(new AdamWTable(), &destroy_adamw_table);
  table->device = device;
  const size_t bytes = chunks.size() * sizeof(AdamWChunk);
  if (bytes == 0) return table.release();
  ZW_ASSIGN_OR_RETURN(void* mem, device_alloc(bytes, device));
  table->chunks = static_cast<AdamWChunk*>(mem);
  table->num_chunks = int64_t(chunks.size());
  int prev = 0;
  ZW_CUDA_TRY(cudaGetDevice(&prev));
  ZW_CUDA_TRY(cudaSetDevice(device));
  cudaError_t err = cudaMemcpy(mem, chunks.data(), bytes, cudaMemcpyHostToDevice);
  // A pageable upload may still be in flight when cudaMemcpy returns, and the contexts' non-blocking streams do
  // not order against the default stream: wait for it here (once, at creation).
  if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
  cudaSetDevice(prev);
  if (err != cudaSuccess) return cuda_status("adamw: uploading the chunk table", err);
  return table.release();
}

void destroy_adamw_table(AdamWTable* table) {
  if (table == nullptr) return;
  device_free(table->chunks, size_t(table->num_chunks) * sizeof(AdamWChunk), table->device);
  delete table;
}

Status adamw_step(const AdamWTable& table, const AdamWConfig& c, int64_t step, const Tensor& params,
                  const Tensor& grads, const Tensor& m, const Tensor& v, const Tensor& params16,
                  const Tensor& grad_factor) {
  if (table.num_chunks == 0) return Status();
  // Exactly adamw_update's host arithmetic (double, then rounded to f32 once).
  const double bc1 = 1.0 - std::pow(double(c.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(c.beta2), double(step));
  AdamWScalars s{};
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.one_minus_beta1 = 1.0f - c.beta1;
  s.one_minus_beta2 = 1.0f - c.beta2;
  s.eps = c.eps;
  s.step_size = static_cast<float>(double(c.lr) / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.decay_on = 1.0f - c.lr * c.weight_decay;
  const unsigned grid = unsigned(table.num_chunks);
  cudaStream_t st = stream();
  float* p = params.data<float>();
  float* mm = m.data<float>();
  float* vv = v.data<float>();
  const float* g = grads.data<float>();
  const float* f = grad_factor.data<float>();
  const bool vec = aligned16(p) && aligned16(mm) && aligned16(vv) && aligned16(g) &&
                   (!params16.defined() || aligned16(params16.mem.ptr));
  if (!params16.defined())
    adamw_kernel<Out16::kNone><<<grid, kAdamWThreads, 0, st>>>(table.chunks, s, p, g, mm, vv, nullptr, f, vec);
  else if (params16.dtype == DataType::kBFloat16)
    adamw_kernel<Out16::kBf16><<<grid, kAdamWThreads, 0, st>>>(table.chunks, s, p, g, mm, vv, params16.mem.ptr, f, vec);
  else
    adamw_kernel<Out16::kF16><<<grid, kAdamWThreads, 0, st>>>(table.chunks, s, p, g, mm, vv, params16.mem.ptr, f, vec);
  ZW_CUDA_LAUNCH_TRY("adamw_step");
  return Status();
}

}  // namespace zw::tensor::cuda
