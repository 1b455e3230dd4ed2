// zero/grad_reducer.cc — gradient buffer pool, in-place reduce-scatter and accumulation into the shard.
//
// Non-goals: see grad_reducer.h.
#include "zero/grad_reducer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/log.h"

namespace zw::zero {

Result<std::unique_ptr<GradReducer>> GradReducer::create(Communicator& comm, const PartitionManager& pm, MemRef accum,
                                                         const GradReducerOptions& options) {
  if (accum.kind != MemKind::kHost)
    return Status(Code::kUnsupported, std::string("grad reducer: the accumulator is ") + mem_kind_name(accum.kind) +
                                          " memory; this build reduces into host memory only");
  if (accum.bytes < size_t(pm.total_shard_numel()) * 4)
    return Status(Code::kInvalidArgument, "grad reducer: the accumulator holds " + std::to_string(accum.bytes) +
                                              " bytes, the shard space needs " +
                                              std::to_string(pm.total_shard_numel() * 4));
  std::unique_ptr<GradReducer> r(new GradReducer(comm, pm, accum, options));
  const int64_t max_unit = pm.max_padded_numel();
  const int n = std::max(1, pm.num_units());
  r->max_pending_ = options.overlap_comm
                        ? int(std::clamp<int64_t>(options.reduce_bucket_numel / std::max<int64_t>(1, max_unit), 1, n))
                        : 0;
  // Buffers: the pending reduce-scatters, plus two units accumulating at once (a tied embedding and a block).
  const int count = r->max_pending_ + 2;
  const size_t bytes = (size_t(max_unit) * 4 + 63) / 64 * 64;
  ZW_ASSIGN_OR_RETURN(r->pool_, alloc_pinned_hugepage(bytes * size_t(count)));
  for (int i = 0; i < count; ++i) r->buffers_.push_back(MemRef::host(r->pool_.as<std::byte>() + bytes * i, bytes));
  r->owner_.assign(size_t(count), -1);
  r->unit_buffer_.assign(size_t(pm.num_units()), -1);
  ZW_INFO(kZero, "grad reducer: %d buffers of %lld elements, up to %d reduce-scatters in flight", count,
          (long long)max_unit, r->max_pending_);
  return r;
}

GradReducer::~GradReducer() {
  for (Pending& p : pending_) (void)p.work.wait();  // the buffers must outlive the communicator's use of them
}

Status GradReducer::complete_front() {
  Pending p = pending_.front();
  pending_.pop_front();
  const auto t0 = std::chrono::steady_clock::now();
  Status s = p.work.wait();
  stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok())
    return s.with_context("rank " + std::to_string(pm_.rank()) + ": reduce-scatter of the gradients of unit " +
                          pm_.unit(p.unit).name);
  const int64_t S = pm_.shard_numel(p.unit);
  const float* src = reinterpret_cast<const float*>(buffers_[p.buffer].data()) + int64_t(pm_.rank()) * S;
  float* dst = reinterpret_cast<float*>(accum_.data()) + pm_.shard_offset(p.unit);
  for (int64_t i = 0; i < S; ++i) dst[i] += src[i];
  owner_[p.buffer] = -1;
  return Status();
}

Status GradReducer::poll() {
  while (!pending_.empty() && pending_.front().work.test()) ZW_TRY(complete_front());
  return Status();
}

Result<MemRef> GradReducer::grads(int unit) {
  if (unit < 0 || unit >= pm_.num_units())
    return Status(Code::kInvalidArgument, "grad reducer: no unit " + std::to_string(unit));
  for (Pending& p : pending_)
    if (!p.counted && !p.work.test()) {
      p.counted = true;
      ++stats_.overlapped;
    }
  ZW_TRY(poll());
  const size_t bytes = size_t(pm_.unit(unit).padded_numel) * 4;
  if (unit_buffer_[unit] >= 0) return buffers_[unit_buffer_[unit]].slice(0, bytes);
  auto free_buffer = [&] { return int(std::find(owner_.begin(), owner_.end(), -1) - owner_.begin()); };
  while (free_buffer() == pool_buffers() && !pending_.empty()) ZW_TRY(complete_front());
  const int b = free_buffer();
  if (b == pool_buffers())
    return Status(Code::kInvalidArgument, "grad reducer: rank " + std::to_string(pm_.rank()) + ": all " +
                                              std::to_string(pool_buffers()) +
                                              " gradient buffers are held by units "
                                              "whose gradients are not final; call reduce() for finished units first");
  owner_[b] = unit;
  unit_buffer_[unit] = b;
  std::memset(buffers_[b].data(), 0, bytes);
  return buffers_[b].slice(0, bytes);
}

Status GradReducer::reduce(int unit) {
  if (unit < 0 || unit >= pm_.num_units() || unit_buffer_[unit] < 0)
    return Status(Code::kInvalidArgument, "grad reducer: reduce of unit " + std::to_string(unit) +
                                              " which has no gradient buffer this micro step; call grads() first");
  const int b = unit_buffer_[unit];
  unit_buffer_[unit] = -1;
  const int64_t S = pm_.shard_numel(unit);
  CollectiveOptions o;
  o.input = buffers_[b].slice(0, size_t(pm_.unit(unit).padded_numel) * 4);
  o.output = buffers_[b].slice(size_t(pm_.rank()) * size_t(S) * 4, size_t(S) * 4);
  o.count = size_t(S);
  o.dtype = DataType::kFloat32;
  o.op = ReduceOp::kSum;
  o.stream = options_.stream;
  ZW_ASSIGN_OR_RETURN(Work w, reduce_scatter(comm_, o));
  pending_.push_back(Pending{unit, b, w, false});
  ++stats_.reduces;
  while (int(pending_.size()) > max_pending_) ZW_TRY(complete_front());
  stats_.max_in_flight = std::max(stats_.max_in_flight, int(pending_.size()));
  return Status();
}

Status GradReducer::flush() {
  while (!pending_.empty()) ZW_TRY(complete_front());
  return Status();
}

}  // namespace zw::zero
