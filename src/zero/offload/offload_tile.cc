// zero/offload/offload_tile.cc — widening and the chunked Adam update of one pipeline tile.
//
// Non-goals: see offload_tile.h.
#include "zero/offload/offload_tile.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>

#include "kernels/element.h"

namespace zw::zero::offload {
namespace {

// 32 Ki elements, as adam_step's own tiles: the chunk's f32 arrays fit in L2 while widened and updated.
constexpr int64_t kTileChunk = int64_t{32} << 10;

__attribute__((target("avx2,f16c"))) void widen_f16_f16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = kernels::f16_to_f32(src[i]);
}

struct Job {
  const AdamParams* decayed;
  const AdamParams* plain;
  int step;
  const OptimizerShard* shard;
  std::span<const DecayRange> ranges;
  const TileIo* io;
  std::atomic<bool> failed{false};
};

// The gradient of elements [a, b) (at most kTileChunk) as f32, widened into `scratch` when it is 16-bit.
const float* grad_f32(const TileIo& io, int64_t a, int64_t b, float* scratch) {
  if (io.grad_dtype == DataType::kFloat32) return static_cast<const float*>(io.grad) + (a - io.grad_base);
  widen_to_f32(io.grad_dtype, static_cast<const uint16_t*>(io.grad) + (a - io.grad_base), scratch, size_t(b - a));
  return scratch;
}

void run_chunk(void* ctx, size_t chunk) {
  Job& job = *static_cast<Job*>(ctx);
  const TileIo& io = *job.io;
  const OptimizerShard& s = *job.shard;
  const int64_t lo = io.begin + int64_t(chunk) * kTileChunk, hi = std::min(io.end, lo + kTileChunk);
  alignas(64) float scratch[kTileChunk];  // 128 KiB on this thread's stack: the widened gradient stays in L2
  // The first range that ends after lo.
  auto it = std::upper_bound(job.ranges.begin(), job.ranges.end(), lo,
                             [](int64_t x, const DecayRange& r) { return x < r.begin + r.numel; });
  for (; it != job.ranges.end() && it->begin < hi; ++it) {
    const int64_t a = std::max(lo, it->begin), b = std::min(hi, it->begin + it->numel);
    if (a >= b) continue;
    const float* g = grad_f32(io, a, b, scratch);
    uint16_t* out = io.out16 != nullptr ? io.out16 + (a - io.out_base) : nullptr;
    const AdamParams& p = it->decay ? *job.decayed : *job.plain;
    const Status st = adam_step(p, s.master + a, s.m + a, s.v + a, g, size_t(b - a),
                                io.out_dtype == DataType::kBFloat16 ? out : nullptr,
                                io.out_dtype == DataType::kFloat16 ? out : nullptr, job.step, nullptr);
    if (!st.ok()) job.failed.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

void widen_to_f32(DataType src_dtype, const uint16_t* src, float* dst, size_t n) {
  if (src_dtype == DataType::kBFloat16) {
    for (size_t i = 0; i < n; ++i) dst[i] = kernels::bf16_to_f32(src[i]);
    return;
  }
  if (kernels::isa_supported(kernels::Isa::kAvx2)) return widen_f16_f16c(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = kernels::f16_to_f32(src[i]);
}

Status update_tile(const AdamParams& decayed, const AdamParams& plain, int step, const OptimizerShard& shard,
                   std::span<const DecayRange> ranges, const TileIo& io, ThreadPool* threads) {
  Job job{&decayed, &plain, step, &shard, ranges, &io};
  const size_t chunks = size_t((io.end - io.begin + kTileChunk - 1) / kTileChunk);
  if (threads == nullptr) {
    for (size_t c = 0; c < chunks; ++c) run_chunk(&job, c);
  } else {
    threads->parallel_for(chunks, run_chunk, &job);
  }
  if (job.failed.load()) return Status(Code::kInternal, "offload pipeline: adam_step failed inside a tile");
  return Status();
}

}  // namespace zw::zero::offload
