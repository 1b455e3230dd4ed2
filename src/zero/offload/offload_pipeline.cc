// zero/offload/offload_pipeline.cc — argument checks, the fused host path and the tile schedule of the tiled path.
//
// Purpose: decide the path per step (offload_pipeline.h), plan the tiles (sub-group by sub-group; tiles with no
// element of a decay range are skipped), and drive the copier and update_tile in the double/triple-buffered order.
// Non-goals: see offload_pipeline.h; the CUDA calls are in offload_pipeline_cuda.cc.
#include "zero/offload/offload_pipeline.h"

#include <algorithm>
#include <string>

#include "common/log.h"
#include "zero/offload/offload_tile.h"

namespace zw::zero {
namespace {

constexpr int kMaxBuffers = 4;

struct Run {  // adjacent decay ranges merged: what one copy moves
  int64_t begin, end;
};

struct Tile {
  int64_t begin, end;  // shard-space elements, inside one sub-group
  size_t first_run;    // first run that ends after begin
};

std::vector<Run> merge_runs(std::span<const DecayRange> ranges) {
  std::vector<Run> runs;
  for (const DecayRange& r : ranges) {
    if (r.numel == 0) continue;
    if (!runs.empty() && runs.back().end == r.begin) {
      runs.back().end = r.begin + r.numel;
    } else {
      runs.push_back(Run{r.begin, r.begin + r.numel});
    }
  }
  return runs;
}

std::vector<Tile> plan_tiles(int64_t n, int64_t group, int64_t tile, const std::vector<Run>& runs) {
  std::vector<Tile> tiles;
  size_t r = 0;
  for (int64_t lo = 0; lo < n; lo += group) {
    const int64_t hi = std::min(n, lo + group);
    for (int64_t a = lo; a < hi; a += tile) {
      const int64_t b = std::min(hi, a + tile);
      while (r < runs.size() && runs[r].end <= a) ++r;
      if (r < runs.size() && runs[r].begin < b) tiles.push_back(Tile{a, b, r});
    }
  }
  return tiles;
}

bool is16(DataType d) { return d == DataType::kFloat16 || d == DataType::kBFloat16; }
bool on_device(const MemRef& r) { return r.kind == MemKind::kCudaDevice; }

Status check_shard(const OptimizerShard& s, std::span<const DecayRange> ranges, int64_t group) {
  auto bad = [](const std::string& what) { return Status(Code::kInvalidArgument, "offload pipeline: " + what); };
  const int64_t n = s.numel;
  if (n < 0 || group < 1) return bad("numel must be >= 0 and sub_group_size >= 1");
  if (n > 0 && (s.master == nullptr || s.m == nullptr || s.v == nullptr)) return bad("master, m and v must be set");
  if (s.grad_dtype != DataType::kFloat32 && !is16(s.grad_dtype))
    return bad(std::string("gradient dtype ") + dtype_name(s.grad_dtype) + " is not float, half or bfloat16");
  if (is16(s.grad_dtype) && !on_device(s.grad))
    return bad("a 16-bit gradient must be device memory (host gradients are f32)");
  if (s.grad.bytes < size_t(n) * dtype_size(s.grad_dtype) || (n > 0 && s.grad.ptr == nullptr))
    return bad("gradient buffer of " + std::to_string(s.grad.bytes) + " bytes is smaller than " + std::to_string(n) +
               " elements");
  if (s.weights_dtype != DataType::kFloat32) {
    if (!is16(s.weights_dtype)) return bad("16-bit weights must be half or bfloat16");
    if (s.weights16.bytes < size_t(n) * 2 || (n > 0 && s.weights16.ptr == nullptr))
      return bad("16-bit weight buffer of " + std::to_string(s.weights16.bytes) + " bytes is smaller than " +
                 std::to_string(n) + " elements");
  }
  int64_t prev_end = 0;
  for (const DecayRange& r : ranges) {
    if (r.numel == 0) continue;
    if (r.numel < 0 || r.begin < prev_end || r.begin + r.numel > n)
      return bad("decay ranges must be sorted, disjoint and inside the shard (range at " + std::to_string(r.begin) +
                 " of " + std::to_string(r.numel) + ", shard " + std::to_string(n) + ")");
    prev_end = r.begin + r.numel;
  }
  return Status();
}

}  // namespace

struct OffloadPipeline::Staging {
  TileCopier* copier = nullptr;  // frees the pinned slots
  std::vector<void*> grad, out;  // per slot: tile_elems × 4 bytes (gradient), × 2 bytes (16-bit weights)
  ~Staging() {
    for (void* p : grad) copier->free_staging(p);
    for (void* p : out) copier->free_staging(p);
  }
};

OffloadPipeline::OffloadPipeline(const OffloadPipelineOptions& options) : options_(options) {}

OffloadPipeline::~OffloadPipeline() {
  if (copier_ != nullptr) {
    const Status st = copier_->synchronize();
    if (!st.ok()) ZW_WARN(kZero, "offload pipeline: copies failed at shutdown: %s", st.to_string().c_str());
  }
  staging_.reset();
  copier_.reset();
}

Result<std::unique_ptr<OffloadPipeline>> OffloadPipeline::create(const OffloadPipelineOptions& options) {
  if (options.tile_elems < 1 || options.buffers < 1 || options.buffers > kMaxBuffers)
    return Status(Code::kInvalidArgument,
                  "offload pipeline: tile_elems must be >= 1 and buffers 1.." + std::to_string(kMaxBuffers) + ", got " +
                      std::to_string(options.tile_elems) + " and " + std::to_string(options.buffers));
  return std::unique_ptr<OffloadPipeline>(new OffloadPipeline(options));
}

Result<std::unique_ptr<OffloadPipeline>> OffloadPipeline::create_with_copier(const OffloadPipelineOptions& options,
                                                                             std::unique_ptr<TileCopier> copier) {
  ZW_ASSIGN_OR_RETURN(std::unique_ptr<OffloadPipeline> p, create(options));
  p->copier_ = std::move(copier);
  return p;
}

Status OffloadPipeline::step(const AdamParams& base, int step, const OptimizerShard& shard,
                             std::span<const DecayRange> ranges, int64_t sub_group_size) {
  ZW_TRY(check_shard(shard, ranges, sub_group_size));
  ZW_TRY(check_adam_params(base, step));
  stats_ = OffloadStepStats{};
  stats_.sub_groups = (shard.numel + sub_group_size - 1) / sub_group_size;
  const bool out_dev = shard.weights_dtype != DataType::kFloat32 && on_device(shard.weights16);
  if (!on_device(shard.grad) && !out_dev) return fused_step(base, step, shard, ranges, sub_group_size);
  return tiled_step(base, step, shard, ranges, sub_group_size);
}

Status OffloadPipeline::synchronize() { return copier_ != nullptr ? copier_->synchronize() : Status(); }

// Host memory throughout: each sub-group's ranges in turn, the 16-bit copy-out fused into the update.
Status OffloadPipeline::fused_step(const AdamParams& base, int step, const OptimizerShard& s,
                                   std::span<const DecayRange> ranges, int64_t group) {
  const float* grads = static_cast<const float*>(s.grad.ptr);
  uint16_t* w16 = static_cast<uint16_t*>(s.weights16.ptr);
  size_t first = 0;  // ranges are in offset order; the first that may reach into this group
  for (int64_t lo = 0; lo < s.numel; lo += group) {
    const int64_t hi = std::min(s.numel, lo + group);
    while (first < ranges.size() && ranges[first].begin + ranges[first].numel <= lo) ++first;
    for (size_t i = first; i < ranges.size() && ranges[i].begin < hi; ++i) {
      const int64_t a = std::max(lo, ranges[i].begin), b = std::min(hi, ranges[i].begin + ranges[i].numel);
      if (a >= b) continue;
      AdamParams p = base;
      if (!ranges[i].decay) p.weight_decay = 0.0f;
      ZW_TRY(adam_step(p, s.master + a, s.m + a, s.v + a, grads + a, size_t(b - a),
                       s.weights_dtype == DataType::kBFloat16 ? w16 + a : nullptr,
                       s.weights_dtype == DataType::kFloat16 ? w16 + a : nullptr, step, options_.threads));
    }
  }
  return Status();
}

Status OffloadPipeline::ensure_copier(const OptimizerShard& s) {
  const bool grad_dev = on_device(s.grad);
  const bool out_dev = s.weights_dtype != DataType::kFloat32 && on_device(s.weights16);
  const int device = grad_dev ? s.grad.device : s.weights16.device;
  if (grad_dev && out_dev && s.grad.device != s.weights16.device)
    return Status(Code::kInvalidArgument, "offload pipeline: the gradient is on device " +
                                              std::to_string(s.grad.device) + " but the 16-bit weights on device " +
                                              std::to_string(s.weights16.device) + "; use one device");
  if (copier_device_ >= 0 && device != copier_device_)
    return Status(Code::kInvalidArgument, "offload pipeline: created for device " + std::to_string(copier_device_) +
                                              ", got buffers on device " + std::to_string(device) +
                                              "; use one pipeline per device");
  if (copier_ == nullptr) {
    ZW_ASSIGN_OR_RETURN(copier_, make_cuda_tile_copier(device, options_.stream));
    copier_device_ = device;
  }
  return Status();
}

Status OffloadPipeline::ensure_staging(const OptimizerShard& s) {
  if (staging_ != nullptr) return Status();
  auto st = std::make_unique<Staging>();
  st->copier = copier_.get();
  const size_t tile = size_t(options_.tile_elems);
  for (int i = 0; i < options_.buffers; ++i) {
    ZW_ASSIGN_OR_RETURN(void* g, copier_->alloc_staging(tile * 4));
    st->grad.push_back(g);
    ZW_ASSIGN_OR_RETURN(void* o, copier_->alloc_staging(tile * 2));
    st->out.push_back(o);
  }
  staging_ = std::move(st);
  return Status();
}

Status OffloadPipeline::tiled_step(const AdamParams& base, int step, const OptimizerShard& s,
                                   std::span<const DecayRange> ranges, int64_t group) {
  ZW_TRY(ensure_copier(s));
  ZW_TRY(ensure_staging(s));
  const std::vector<Run> runs = merge_runs(ranges);
  const std::vector<Tile> tiles = plan_tiles(s.numel, group, options_.tile_elems, runs);
  stats_.tiles = int64_t(tiles.size());
  const bool grad_dev = on_device(s.grad);
  const bool out_dev = s.weights_dtype != DataType::kFloat32 && on_device(s.weights16);
  const size_t gsize = dtype_size(s.grad_dtype);
  const int nbuf = options_.buffers, ahead = options_.serialize ? 1 : nbuf;
  AdamParams plain = base;
  plain.weight_decay = 0.0f;
  // Calls fn(a, b) for each run's part [a, b) inside tile t.
  auto for_runs = [&](const Tile& t, auto&& fn) -> Status {
    for (size_t r = t.first_run; r < runs.size() && runs[r].begin < t.end; ++r)
      ZW_TRY(fn(std::max(t.begin, runs[r].begin), std::min(t.end, runs[r].end)));
    return Status();
  };
  auto issue_down = [&](size_t k) -> Status {
    if (!grad_dev) return Status();
    const Tile& t = tiles[k];
    auto* dst = static_cast<std::byte*>(staging_->grad[k % size_t(nbuf)]);
    return for_runs(t, [&](int64_t a, int64_t b) {
      stats_.bytes_down += size_t(b - a) * gsize;
      return copier_->copy_down(int(k % size_t(nbuf)), dst + size_t(a - t.begin) * gsize,
                                s.grad.data() + size_t(a) * gsize, size_t(b - a) * gsize);
    });
  };
  ZW_TRY(copier_->begin());
  // On an error the copies issued so far still get the compute stream ordered after them (end() below).
  const Status st = [&]() -> Status {
    for (size_t k = 0; k < std::min(tiles.size(), size_t(ahead)); ++k) ZW_TRY(issue_down(k));
    for (size_t k = 0; k < tiles.size(); ++k) {
      const Tile& t = tiles[k];
      const int slot = int(k % size_t(nbuf));
      if (grad_dev) ZW_TRY(copier_->wait_down(slot));
      if (out_dev) ZW_TRY(copier_->wait_up(slot));  // the slot's staging tile was last copied up by tile k − nbuf
      offload::TileIo io;
      io.begin = t.begin;
      io.end = t.end;
      io.grad = grad_dev ? staging_->grad[size_t(slot)] : s.grad.ptr;
      io.grad_base = grad_dev ? t.begin : 0;
      io.grad_dtype = s.grad_dtype;
      io.out_dtype = s.weights_dtype;
      io.out16 =
          out_dev ? static_cast<uint16_t*>(staging_->out[size_t(slot)]) : static_cast<uint16_t*>(s.weights16.ptr);
      io.out_base = out_dev ? t.begin : 0;
      ZW_TRY(offload::update_tile(base, plain, step, s, ranges, io, options_.threads));
      if (out_dev) {
        auto* src = static_cast<std::byte*>(staging_->out[size_t(slot)]);
        ZW_TRY(for_runs(t, [&](int64_t a, int64_t b) {
          stats_.bytes_up += size_t(b - a) * 2;
          return copier_->copy_up(slot, s.weights16.data() + size_t(a) * 2, src + size_t(a - t.begin) * 2,
                                  size_t(b - a) * 2);
        }));
        if (options_.serialize) ZW_TRY(copier_->wait_up(slot));
      }
      if (k + size_t(ahead) < tiles.size()) ZW_TRY(issue_down(k + size_t(ahead)));  // slot of tile k is free again
    }
    return Status();
  }();
  const Status ended = copier_->end();
  return st.ok() ? ended : st;
}

}  // namespace zw::zero
