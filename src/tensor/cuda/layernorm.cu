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
// Backward: dinp by the row kernels (rstd·(g - mean(g) - xhat·mean(g·xhat)), g = dout·weight). dweight/dbias by
// a column kernel: block (channel block of 32 groups, chunk of rows) with 8 warps striding the chunk's rows; the
// warps' sums are combined in warp order through shared memory into one f32 partial per (chunk, channel) in the
// context scratch; column_sums.cuh adds each channel's partials in a fixed order into dweight/dbias. No atomics.
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

// dweight/dbias through per-chunk partials in the context scratch (see the file comment).
template <class T>
Status launch_dparams(const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                      const Tensor& mean, const Tensor& rstd) {
  const int64_t C = inp.shape.last(), N = inp.shape.rows();
  CudaContext::Impl& ctx = current();
  const int64_t fit = int64_t(ctx.scratch_bytes / (2 * sizeof(float) * size_t(C)));
  int64_t chunks = (N + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  chunks = chunks < kMaxChunks ? chunks : kMaxChunks;
  chunks = chunks < fit ? chunks : fit;
  if (chunks < 1)
    return Status(Code::kInvalidArgument, "layernorm_backward: dweight/dbias partial sums for C=" + std::to_string(C) +
                                              " need " + std::to_string(2 * sizeof(float) * size_t(C)) +
                                              " bytes of CUDA context scratch, the context has " +
                                              std::to_string(ctx.scratch_bytes));
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  float* part_dw = static_cast<float*>(ctx.scratch);
  float* part_db = part_dw + chunks * C;
  const bool packed = C % kPack<T> == 0 && aligned16(dout.mem.ptr) && aligned16(inp.mem.ptr);
  const int64_t groups = packed ? C / kPack<T> : C;
  const dim3 grid{unsigned((groups + 31) / 32), unsigned(chunks)};
  if (packed) {
    layernorm_dparams_partial<T, kPack<T>><<<grid, kThreads, 0, ctx.stream>>>(
        part_dw, part_db, dout.data<T>(), inp.data<T>(), mean.data<float>(), rstd.data<float>(), N, C, rows_per_chunk);
  } else {
    layernorm_dparams_partial<T, 1><<<grid, kThreads, 0, ctx.stream>>>(
        part_dw, part_db, dout.data<T>(), inp.data<T>(), mean.data<float>(), rstd.data<float>(), N, C, rows_per_chunk);
  }
  ZW_CUDA_LAUNCH_TRY("layernorm_backward: partial dweight/dbias kernel");
  return add_column_sums(ctx.stream, "layernorm_backward: dweight/dbias kernel",
                         ColumnSumJob{dweight.defined() ? dweight.data<float>() : nullptr, part_dw},
                         ColumnSumJob{dbias.defined() ? dbias.data<float>() : nullptr, part_db}, chunks, C);
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
    if (dweight.defined() || dbias.defined()) ZW_TRY(launch_dparams<T>(dweight, dbias, dout, inp, mean, rstd));
    if (!dinp.defined()) return Status();
    if (init == GradInit::kOverwrite) return launch_dinp<T, false>(dinp, dout, inp, weight, mean, rstd);
    return launch_dinp<T, true>(dinp, dout, inp, weight, mean, rstd);
  });
}

}  // namespace zw::tensor::cuda
