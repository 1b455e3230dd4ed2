// tensor/cuda/layernorm_backward.cu — layer normalization backward on CUDA, with deterministic weight and bias
// gradients (the forward is layernorm.cu; the row layout both share is layernorm_rows.cuh).
//
// dinp = rstd·(g - mean(g) - xhat·mean(g·xhat)), g = dout·weight, and dweight/dbias as one f32 partial per (chunk of
// rows, channel) in the context scratch, which column_sums.cuh adds in a fixed order into dweight/dbias. No atomics.
// Two ways, the same sums in the same order:
//  - one pass (16-bit values, C a multiple of 8 up to 1024 — at most 4 packs of 8 per lane —, 16-byte aligned
//    tensors, all three gradients asked for; GPT-2 124M's and 350M's layernorms): one block per chunk; its 8 warps take
//    the chunk's rows in turn (warp y: rows y, y + 8, ...), each lane keeps the dweight/dbias sums of its own columns
//    in registers while it writes dinp, and the warps' sums are added in warp order through shared memory at the end.
//    dout and inp are read once (on an H100, GPT-2 124M's layernorm backwards took 1.59 ms per step against 1.84).
//  - otherwise two kernels: the row kernels for dinp, and a column kernel (block: channel block of 32 groups, chunk
//    of rows; the same warp order and chunks) for the partials, which reads dout and inp again.
// Non-goals: C large enough that 2·chunks·C floats of partials do not fit the scratch.
#include <cstdint>
#include <string>
#include <type_traits>

#include "tensor/cuda/column_sums.cuh"
#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/layernorm_rows.cuh"

namespace zw::tensor::cuda {
namespace {

using namespace layernorm_rows;  // NOLINT(google-build-using-namespace): the kernels' shared layout

constexpr int kMinRowsPerChunk = 64;  // dweight/dbias partials: rows per block at least
constexpr int kMaxChunks = 512;       // and at most this many partial rows

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

// Where the backward's dweight/dbias partials go: `count` chunks of `rows` rows (a function of the shape and the
// scratch only, so the summation order never depends on the device), one partial row of C floats per chunk for each
// of dweight and dbias, in the context scratch.
struct Partials {
  int64_t count = 0, rows = 0, C = 0;  // chunks, rows per chunk, channels
  float* dw = nullptr;                 // [count, C]
  float* db = nullptr;                 // [count, C], right after dw
};

// The partials of an [N, C] backward, or an error when not even one partial row fits the scratch.
Result<Partials> param_partials(int64_t N, int64_t C) {
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
  Partials p;
  p.rows = (N + chunks - 1) / chunks;
  p.count = (N + p.rows - 1) / p.rows;
  p.C = C;
  p.dw = static_cast<float*>(ctx.scratch);
  p.db = p.dw + p.count * C;
  return p;
}

// dweight/dbias += the column sums of the partials (those asked for).
Status add_partials(const Tensor& dweight, const Tensor& dbias, const Partials& p) {
  return add_column_sums(current().stream, "layernorm_backward: dweight/dbias kernel",
                         ColumnSumJob{dweight.defined() ? dweight.data<float>() : nullptr, p.dw},
                         ColumnSumJob{dbias.defined() ? dbias.data<float>() : nullptr, p.db}, p.count, p.C);
}

// dweight/dbias through per-chunk partials in the context scratch (see the file comment).
template <class T>
Status launch_dparams(const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                      const Tensor& mean, const Tensor& rstd) {
  const int64_t C = inp.shape.last(), N = inp.shape.rows();
  ZW_ASSIGN_OR_RETURN(const Partials parts, param_partials(N, C));
  const cudaStream_t stream = current().stream;
  const bool packed = C % kPack<T> == 0 && aligned16(dout.mem.ptr) && aligned16(inp.mem.ptr);
  const int64_t groups = packed ? C / kPack<T> : C;
  const dim3 grid{unsigned((groups + 31) / 32), unsigned(parts.count)};
  if (packed) {
    layernorm_dparams_partial<T, kPack<T>><<<grid, kThreads, 0, stream>>>(
        parts.dw, parts.db, dout.data<T>(), inp.data<T>(), mean.data<float>(), rstd.data<float>(), N, C, parts.rows);
  } else {
    layernorm_dparams_partial<T, 1><<<grid, kThreads, 0, stream>>>(
        parts.dw, parts.db, dout.data<T>(), inp.data<T>(), mean.data<float>(), rstd.data<float>(), N, C, parts.rows);
  }
  ZW_CUDA_LAUNCH_TRY("layernorm_backward: partial dweight/dbias kernel");
  return add_partials(dweight, dbias, parts);
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
    ZW_ASSIGN_OR_RETURN(const Partials parts, param_partials(N, C));
    auto run = [&](auto j) {
      layernorm_backward_one_pass<T, decltype(j)::value, kAccumulate>
          <<<unsigned(parts.count), kThreads, 0, current().stream>>>(
              dinp.data<T>(), parts.dw, parts.db, dout.data<T>(), inp.data<T>(), weight.data<T>(), mean.data<float>(),
              rstd.data<float>(), N, int(C), parts.rows);
    };
    switch ((C / P + 31) / 32) {  // exactly the packs per lane (3 for GPT-2 124M): every unused one holds registers
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
    ZW_TRY(add_partials(dweight, dbias, parts));
    return true;
  }
}

}  // namespace

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
