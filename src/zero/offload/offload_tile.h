// zero/offload/offload_tile.h — the host half of one tile of the offload pipeline: widen the staged gradient, run the
// Adam step over the tile's decay ranges, write the 16-bit weights (internal to offload_pipeline.cc).
//
// Purpose: one parallel_for per tile over chunks of 32 Ki elements; each chunk widens its part of a 16-bit gradient
// into a 128 KiB f32 scratch on its thread's stack (still in L2 when the update reads it) and calls adam_step on the
// chunk's pieces of each decay range, single-threaded. Per-element math, so the split gives the same bits as one call.
// Threads running update_tile need 128 KiB of stack for the scratch (the pool's threads and a default std::thread have
// 8 MiB). Non-goals: copies (offload_pipeline.cc), argument checks (done once per step by the caller).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "zero/offload/offload_pipeline.h"

namespace zw::zero::offload {

// Where one tile's inputs and outputs are. Each pointer is indexed by (element − base), base being the tile's first
// element for staged buffers or 0 for buffers that span the whole shard.
struct TileIo {
  int64_t begin = 0, end = 0;  // shard-space element range of the tile
  const void* grad = nullptr;  // gradient (f32, f16 or bf16)
  int64_t grad_base = 0;       // element index of grad[0]
  DataType grad_dtype = DataType::kFloat32;
  uint16_t* out16 = nullptr;  // 16-bit weights out (null: none)
  int64_t out_base = 0;       // element index of out16[0]
  DataType out_dtype = DataType::kFloat32;
};

// Steps the tile's elements that lie in `ranges` (sorted). decayed / plain are the parameters for ranges with and
// without weight decay. kInternal if adam_step failed (it cannot after the caller validated the parameters).
Status update_tile(const AdamParams& decayed, const AdamParams& plain, int step, const OptimizerShard& shard,
                   std::span<const DecayRange> ranges, const TileIo& io, ThreadPool* threads);

// dst[i] = src[i] widened from f16 / bf16 to f32, exactly (F16C when the CPU has it).
void widen_to_f32(DataType src_dtype, const uint16_t* src, float* dst, size_t n);

}  // namespace zw::zero::offload
