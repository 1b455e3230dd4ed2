// tensor/cuda/layernorm.cu — layer normalization on CUDA: forward (optionally fused with the residual add that
// produces its input) and backward, with deterministic weight and bias gradients.
//
// Row kernels run one warp per row, 8 rows per 256-thread block. When C is a multiple of the pack width, the
// tensors are 16-byte aligned and C ≤ 2048, each lane keeps its packs of the row in registers (J packs per lane,
// J the smallest of 1, 2, 4, 8, 16 that covers the row) and the row is read once; otherwise a general kernel
// walks the row lane-strided as often as it needs (L1/L2 serve the re-reads). Statistics are two-pass in f32
// (mean, then the centred variance) as the CPU computes them; every sum is a per-lane sum in a fixed order then a
// butterfly over the warp, so the bits do not change between runs.
// residual_layernorm_forward rounds res = a + b to the storage dtype, stores it, and normalizes those rounded
// values (what a separate residual_forward + layernorm_forward would compute), in one kernel.
// Backward: dinp = rstd·(g - mean(g) - xhat·mean(g·xhat)), g = dout·weight, and dweight/dbias as one f32 partial
// per (chunk of rows, channel) in the context scratch, which column_sums.cuh adds in a fixed order into
// dweight/dbias. No atomics. Two ways, the same sums in the same order:
//  - one pass (16-bit values, C a multiple of 8 up to 1024 — at most 4 packs of 8 per lane —, 16-byte aligned
//    tensors, all three gradients asked for; GPT-2 124M's and 350M's layernorms): one block per chunk; its 8 warps take
//    the chunk's rows in turn (warp y: rows y, y + 8, ...), each lane keeps the dweight/dbias sums of its own columns
//    in registers while it writes dinp, and the warps' sums are added in warp order through shared memory at the end.
//    dout and inp are read once.
//  - otherwise two kernels: the row kernels for dinp, and a column kernel (block: channel block of 32 groups, chunk
//    of rows; the same warp order and chunks) for the partials, which reads dout and inp again.
// Non-goals: RMSNorm, C large enough that 2·chunks·C floats of partials do not fit the scratch.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "tensor/cuda/column_sums.cuh"
#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/dtype.cuh"

namespace zw::tensor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // one warp per row
constexpr int kMaxRowFloats = 64;             // f32 values of one row a lane keeps in registers (C ≤ 2048)
constexpr int kMinRowsPerChunk = 64;          // dweight/dbias partials: rows per block at least
constexpr int kMaxChunks = 512;               // and at most this many partial rows
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

// dinp [+]= rstd·(g - mean(g) - xhat·mean(g·xhat)), register-resident row (as layernorm_forward_packed).
template <class T, int J, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    layernorm_dinp_packed(T* dinp, const T* dout, const T* inp, const T* weight, const float* mean, const float* rstd,
                          int64_t N, int C) {
  constexpr int P = kPack<T>;
  const int lane = int(threadIdx.x % 32);
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const int npacks = C / P;
  const int64_t off = row * C;
  const float m = mean[row], s = rstd[row];
  float g[J][P], xh[J][P];
  float gs = 0.0f, gxs = 0.0f;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = (lane + 32 * j) * P;
    if (lane + 32 * j < npacks) {
      float dy[P], x[P], w[P];
      load_f32<P>(dout + off + c, dy);
      load_f32<P>(inp + off + c, x);
      load_f32<P>(weight + c, w);
#pragma unroll
      for (int k = 0; k < P; ++k) {
        g[j][k] = dy[k] * w[k];
        xh[j][k] = (x[k] - m) * s;
        gs += g[j][k];
        gxs += g[j][k] * xh[j][k];
      }
    }
  }
  const float g_mean = warp_sum(gs) / float(C), gx_mean = warp_sum(gxs) / float(C);
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = (lane + 32 * j) * P;
    if (lane + 32 * j < npacks) {
      float d[P];
#pragma unroll
      for (int k = 0; k < P; ++k) d[k] = s * (g[j][k] - g_mean - xh[j][k] * gx_mean);
      if constexpr (kAccumulate) {
        float prev[P];
        load_f32<P>(dinp + off + c, prev);
#pragma unroll
        for (int k = 0; k < P; ++k) d[k] = prev[k] + d[k];
      }
      store_f32<P>(dinp + off + c, d);
    }
  }
}

// dinp for any C: two lane-strided passes.
template <class T, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    layernorm_dinp_rows(T* dinp, const T* dout, const T* inp, const T* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
  const int lane = int(threadIdx.x % 32);
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const int64_t off = row * C;
  const float m = mean[row], s = rstd[row];
  float gs = 0.0f, gxs = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = to_f32(dout[off + c]) * to_f32(weight[c]);
    gs += g;
    gxs += g * ((to_f32(inp[off + c]) - m) * s);
  }
  const float g_mean = warp_sum(gs) / float(C), gx_mean = warp_sum(gxs) / float(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float g = to_f32(dout[off + c]) * to_f32(weight[c]);
    const float v = s * (g - g_mean - ((to_f32(inp[off + c]) - m) * s) * gx_mean);
    dinp[off + c] = from_f32<T>(kAccumulate ? to_f32(dinp[off + c]) + v : v);
  }
}

// Partial dweight/dbias of one chunk of rows: grid (channel blocks of 32 groups of K, chunks). See the file comment.
template <class T, int K>
__global__ void __launch_bounds__(kThreads)
    layernorm_dparams_partial(float* part_dw, float* part_db, const T* dout, const T* inp, const float* mean,
                              const float* rstd, int64_t N, int64_t C, int64_t rows_per_chunk) {
  __shared__ float sh_dw[kRowsPerBlock][32][K];
  __shared__ float sh_db[kRowsPerBlock][32][K];
  const int lane = int(threadIdx.x % 32), wy = int(threadIdx.x / 32);
  const int64_t c = (int64_t{blockIdx.x} * 32 + lane) * K;
  const bool active = c < C;
  const int64_t r0 = int64_t{blockIdx.y} * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float dw[K] = {}, db[K] = {};
  for (int64_t r = r0 + wy; active && r < r1; r += kRowsPerBlock) {
    const float m = mean[r], s = rstd[r];
    float dy[K], x[K];
    load_f32<K>(dout + r * C + c, dy);
    load_f32<K>(inp + r * C + c, x);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      dw[k] += dy[k] * ((x[k] - m) * s);
      db[k] += dy[k];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    sh_dw[wy][lane][k] = dw[k];
    sh_db[wy][lane][k] = db[k];
  }
  __syncthreads();
  if (wy != 0 || !active) return;
  float* pw = part_dw + int64_t{blockIdx.y} * C + c;
  float* pb = part_db + int64_t{blockIdx.y} * C + c;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float sw = 0.0f, sb = 0.0f;
    for (int y = 0; y < kRowsPerBlock; ++y) {
      sw += sh_dw[y][lane][k];
      sb += sh_db[y][lane][k];
    }
    pw[k] = sw;
    pb[k] = sb;
  }
}

// One pass over the chunk blockIdx.x of rows: dinp as layernorm_dinp_packed computes it, and the chunk's dweight/dbias
// partials as layernorm_dparams_partial sums them (same rows per warp, same order: the same bits). 16-bit T only;
// J packs per lane; the row's values stay packed in registers (dout, inp and the weight: 3·J 16-byte packs).
template <class T, int J, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_one_pass(T* dinp, float* part_dw, float* part_db, const T* dout, const T* inp, const T* weight,
                                const float* mean, const float* rstd, int64_t N, int C, int64_t rows_per_chunk) {
  constexpr int P = kPack<T>;
  static_assert(P == 8, "16-bit values");
  const int lane = int(threadIdx.x % 32), wy = int(threadIdx.x / 32);
  const int npacks = C / P;
  const int64_t r0 = int64_t{blockIdx.x} * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  Pack<T> w[J];
#pragma unroll
  for (int j = 0; j < J; ++j)
    if (lane + 32 * j < npacks) w[j] = reinterpret_cast<const Pack<T>*>(weight)[lane + 32 * j];
  float dw[J][P] = {}, db[J][P] = {};
  for (int64_t r = r0 + wy; r < r1; r += kRowsPerBlock) {
    const Pack<T>* dy_row = reinterpret_cast<const Pack<T>*>(dout + r * C);
    const Pack<T>* x_row = reinterpret_cast<const Pack<T>*>(inp + r * C);
    const float m = mean[r], s = rstd[r];
    Pack<T> dy[J], x[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      if (lane + 32 * j < npacks) {
        dy[j] = dy_row[lane + 32 * j];
        x[j] = x_row[lane + 32 * j];
      }
    }
    float gs = 0.0f, gxs = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      if (lane + 32 * j < npacks) {
#pragma unroll
        for (int k = 0; k < P; ++k) {
          const float g = to_f32(dy[j].v[k]) * to_f32(w[j].v[k]);
          gs += g;
          gxs += g * ((to_f32(x[j].v[k]) - m) * s);
        }
      }
    }
    const float g_mean = warp_sum(gs) / float(C), gx_mean = warp_sum(gxs) / float(C);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      if (lane + 32 * j < npacks) {
        T* out = dinp + r * C + (lane + 32 * j) * P;
        float d[P];
#pragma unroll
        for (int k = 0; k < P; ++k) {
          const float dyk = to_f32(dy[j].v[k]), xh = (to_f32(x[j].v[k]) - m) * s;
          d[k] = s * (dyk * to_f32(w[j].v[k]) - g_mean - xh * gx_mean);
          dw[j][k] += dyk * xh;
          db[j][k] += dyk;
        }
        if constexpr (kAccumulate) {
          float prev[P];
          load_f32<P>(out, prev);
#pragma unroll
          for (int k = 0; k < P; ++k) d[k] = prev[k] + d[k];
        }
        store_f32<P>(out, d);
      }
    }
  }
  // The warps' sums, added in warp order: one pack column (32 lanes × P values) at a time through shared memory.
  __shared__ float sh_dw[kRowsPerBlock][32 * P];
  __shared__ float sh_db[kRowsPerBlock][32 * P];
  float* pw = part_dw + int64_t{blockIdx.x} * C;
  float* pb = part_db + int64_t{blockIdx.x} * C;
#pragma unroll
  for (int j = 0; j < J; ++j) {
#pragma unroll
    for (int k = 0; k < P; ++k) {
      sh_dw[wy][lane * P + k] = dw[j][k];
      sh_db[wy][lane * P + k] = db[j][k];
    }
    __syncthreads();
    const int e = int(threadIdx.x);  // kThreads == 32·P: one value of the pack column per thread
    if (32 * j * P + e < C) {
      float sw = 0.0f, sb = 0.0f;
      for (int y = 0; y < kRowsPerBlock; ++y) {
        sw += sh_dw[y][e];
        sb += sh_db[y][e];
      }
      pw[32 * j * P + e] = sw;
      pb[32 * j * P + e] = sb;
    }
    __syncthreads();
  }
}

// Calls fn(std::integral_constant<int, J>{}) for the smallest J in {1, 2, 4, 8, 16} with J ≥ need and
// J·P ≤ kMaxRowFloats; false when there is none (the caller then takes the general path).
template <int P, class Fn>
bool with_packs_per_lane(int need, Fn&& fn) {
  if (need <= 1) {
    fn(std::integral_constant<int, 1>{});
  } else if (need <= 2) {
    fn(std::integral_constant<int, 2>{});
  } else if (need <= 4) {
    fn(std::integral_constant<int, 4>{});
  } else if (8 * P <= kMaxRowFloats && need <= 8) {
    if constexpr (8 * P <= kMaxRowFloats) fn(std::integral_constant<int, 8>{});
  } else if (16 * P <= kMaxRowFloats && need <= 16) {
    if constexpr (16 * P <= kMaxRowFloats) fn(std::integral_constant<int, 16>{});
  } else {
    return false;
  }
  return true;
}

// Whether the register-resident kernels take rows of C elements of T at these addresses.
template <class T>
bool packed_rows(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % kPack<T> != 0 || C > 32 * kMaxRowFloats) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
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

template <class T, bool kAccumulate>
Status launch_dinp(const Tensor& dinp, const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& mean,
                   const Tensor& rstd) {
  const int64_t C = inp.shape.last(), N = inp.shape.rows();
  const unsigned grid = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  bool launched = false;
  if (packed_rows<T>(C, {dinp.mem.ptr, dout.mem.ptr, inp.mem.ptr, weight.mem.ptr})) {
    const int need = int((C / kPack<T> + 31) / 32);
    launched = with_packs_per_lane<kPack<T>>(need, [&](auto j) {
      layernorm_dinp_packed<T, decltype(j)::value, kAccumulate>
          <<<grid, kThreads, 0, stream()>>>(dinp.data<T>(), dout.data<T>(), inp.data<T>(), weight.data<T>(),
                                            mean.data<float>(), rstd.data<float>(), N, int(C));
    });
  }
  if (!launched)
    layernorm_dinp_rows<T, kAccumulate><<<grid, kThreads, 0, stream()>>>(
        dinp.data<T>(), dout.data<T>(), inp.data<T>(), weight.data<T>(), mean.data<float>(), rstd.data<float>(), N, C);
  ZW_CUDA_LAUNCH_TRY("layernorm_backward: dinp kernel");
  return Status();
}

// The chunks of rows whose dweight/dbias partials the backward writes (a function of the shape and the scratch only,
// so the summation order never depends on the device), or an error when not even one partial row fits.
struct Chunks {
  int64_t count = 0, rows = 0;  // chunks, rows per chunk
};
Result<Chunks> param_chunks(int64_t N, int64_t C) {
  const CudaContext::Impl& ctx = current();
  const int64_t fit = int64_t(ctx.scratch_bytes / (2 * sizeof(float) * size_t(C)));
  int64_t chunks = (N + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  chunks = chunks < kMaxChunks ? chunks : kMaxChunks;
  chunks = chunks < fit ? chunks : fit;
  if (chunks < 1)
    return Status(Code::kInvalidArgument, "layernorm_backward: dweight/dbias partial sums for C=" + std::to_string(C) +
                                              " need " + std::to_string(2 * sizeof(float) * size_t(C)) +
                                              " bytes of CUDA context scratch, the context has " +
                                              std::to_string(ctx.scratch_bytes));
  Chunks c;
  c.rows = (N + chunks - 1) / chunks;
  c.count = (N + c.rows - 1) / c.rows;
  return c;
}

Status add_partials(const Tensor& dweight, const Tensor& dbias, const Chunks& chunks, int64_t C) {
  const CudaContext::Impl& ctx = current();
  float* part_dw = static_cast<float*>(ctx.scratch);
  return add_column_sums(ctx.stream, "layernorm_backward: dweight/dbias kernel",
                         ColumnSumJob{dweight.defined() ? dweight.data<float>() : nullptr, part_dw},
                         ColumnSumJob{dbias.defined() ? dbias.data<float>() : nullptr, part_dw + chunks.count * C},
                         chunks.count, C);
}

// dweight/dbias through per-chunk partials in the context scratch (see the file comment).
template <class T>
Status launch_dparams(const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                      const Tensor& mean, const Tensor& rstd) {
  const int64_t C = inp.shape.last(), N = inp.shape.rows();
  ZW_ASSIGN_OR_RETURN(const Chunks chunks, param_chunks(N, C));
  CudaContext::Impl& ctx = current();
  float* part_dw = static_cast<float*>(ctx.scratch);
  float* part_db = part_dw + chunks.count * C;
  const bool packed = C % kPack<T> == 0 && aligned16(dout.mem.ptr) && aligned16(inp.mem.ptr);
  const int64_t groups = packed ? C / kPack<T> : C;
  const dim3 grid{unsigned((groups + 31) / 32), unsigned(chunks.count)};
  if (packed) {
    layernorm_dparams_partial<T, kPack<T>><<<grid, kThreads, 0, ctx.stream>>>(
        part_dw, part_db, dout.data<T>(), inp.data<T>(), mean.data<float>(), rstd.data<float>(), N, C, chunks.rows);
  } else {
    layernorm_dparams_partial<T, 1><<<grid, kThreads, 0, ctx.stream>>>(
        part_dw, part_db, dout.data<T>(), inp.data<T>(), mean.data<float>(), rstd.data<float>(), N, C, chunks.rows);
  }
  ZW_CUDA_LAUNCH_TRY("layernorm_backward: partial dweight/dbias kernel");
  return add_partials(dweight, dbias, chunks, C);
}

// The one-pass backward (see the file comment) where it applies: 16-bit values, every gradient asked for, rows of
// at most 4 packs per lane, 16-byte aligned tensors. False: the caller runs the two-kernel path.
template <class T, bool kAccumulate>
Result<bool> launch_one_pass(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                             const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
    const int64_t C = inp.shape.last(), N = inp.shape.rows();
    constexpr int P = kPack<T>;
    if (!dinp.defined() || !dweight.defined() || !dbias.defined() || C % P != 0 || C > 4 * 32 * P) return false;
    for (const void* p : {dinp.mem.ptr, dout.mem.ptr, inp.mem.ptr, weight.mem.ptr})
      if (!aligned16(p)) return false;
    ZW_ASSIGN_OR_RETURN(const Chunks chunks, param_chunks(N, C));
    CudaContext::Impl& ctx = current();
    float* part_dw = static_cast<float*>(ctx.scratch);
    float* part_db = part_dw + chunks.count * C;
    auto run = [&](auto j) {
      layernorm_backward_one_pass<T, decltype(j)::value, kAccumulate>
          <<<unsigned(chunks.count), kThreads, 0, ctx.stream>>>(dinp.data<T>(), part_dw, part_db, dout.data<T>(),
                                                                inp.data<T>(), weight.data<T>(), mean.data<float>(),
                                                                rstd.data<float>(), N, int(C), chunks.rows);
    };
    switch ((C / P + 31) / 32) {
      case 1:
        run(std::integral_constant<int, 1>{});
        break;
      case 2:
        run(std::integral_constant<int, 2>{});
        break;
      case 3:
        run(std::integral_constant<int, 3>{});
        break;
      default:
        run(std::integral_constant<int, 4>{});
        break;
    }
    ZW_CUDA_LAUNCH_TRY("layernorm_backward: one-pass kernel");
    ZW_TRY(add_partials(dweight, dbias, chunks, C));
    return true;
  }
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

Status layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                          GradInit init) {
  if (inp.shape.rows() == 0 || inp.shape.last() == 0) return Status();
  return dispatch_dtype("layernorm_backward", inp.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const Result<bool> one_pass = init == GradInit::kOverwrite
                                      ? launch_one_pass<T, false>(dinp, dweight, dbias, dout, inp, weight, mean, rstd)
                                      : launch_one_pass<T, true>(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
    if (!one_pass.ok()) return one_pass.status();
    if (one_pass.value()) return Status();
    if (dweight.defined() || dbias.defined()) ZW_TRY(launch_dparams<T>(dweight, dbias, dout, inp, mean, rstd));
    if (!dinp.defined()) return Status();
    if (init == GradInit::kOverwrite) return launch_dinp<T, false>(dinp, dout, inp, weight, mean, rstd);
    return launch_dinp<T, true>(dinp, dout, inp, weight, mean, rstd);
  });
}

}  // namespace zw::tensor::cuda
