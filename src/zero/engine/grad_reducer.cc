// zero/engine/grad_reducer.cc — gradient buffers, bucket packing (scale + narrowing to the communication dtype),
// in-place reduce-scatter of a bucket and widening accumulation into the f32 shard.
//
// Non-goals: see grad_reducer.h.
#include "zero/engine/grad_reducer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "common/log.h"
#include "kernels/element.h"

namespace zw::zero {
namespace {

// dst[i] = src[i] · scale rounded to `dtype` (nearest-even; kernels/element.h is the one definition of it).
void narrow(const float* src, int64_t n, float scale, DataType dtype, std::byte* dst) {
  if (dtype == DataType::kFloat32) {
    float* d = reinterpret_cast<float*>(dst);
    if (scale == 1.0f) {
      std::memcpy(d, src, size_t(n) * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] = src[i] * scale;
    }
    return;
  }
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
  if (dtype == DataType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) d[i] = kernels::f32_to_f16(src[i] * scale);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = kernels::f32_to_bf16(src[i] * scale);
  }
}

// dst[i] += src[i] widened to f32 (exact), so an inf/nan of the 16-bit sum lands in the accumulator.
void widen_add(const std::byte* src, int64_t n, DataType dtype, float* dst) {
  if (dtype == DataType::kFloat32) {
    const float* s = reinterpret_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] += s[i];
    return;
  }
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  if (dtype == DataType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] += kernels::f16_to_f32(s[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] += kernels::bf16_to_f32(s[i]);
  }
}

size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

Result<std::unique_ptr<GradReducer>> GradReducer::create(Communicator& comm, const PartitionManager& pm, MemRef accum,
                                                         const GradReducerOptions& options) {
  const bool device = options.device != nullptr;
  if ((accum.kind == MemKind::kCudaDevice) != device)
    return Status(Code::kInvalidArgument, std::string("grad reducer: the accumulator is ") +
                                              mem_kind_name(accum.kind) + " memory but the reducer " +
                                              (device ? "runs on a device" : "has no device") +
                                              "; the accumulator must be device memory exactly when a device is set");
  if (accum.bytes < size_t(pm.total_shard_numel()) * 4)
    return Status(Code::kInvalidArgument, "grad reducer: the accumulator holds " + std::to_string(accum.bytes) +
                                              " bytes, the shard space needs " +
                                              std::to_string(pm.total_shard_numel() * 4));
  const DataType dt = options.comm_dtype;
  if (dt != DataType::kFloat32 && dt != DataType::kFloat16 && dt != DataType::kBFloat16)
    return Status(Code::kInvalidArgument, std::string("grad reducer: gradients cannot be reduced in ") +
                                              dtype_name(dt) + "; use f32, f16 or bf16");
  if (!(options.predivide > 0) || !std::isfinite(options.predivide))
    return Status(Code::kInvalidArgument,
                  "grad reducer: predivide must be finite and > 0, got " + std::to_string(options.predivide));
  std::unique_ptr<GradReducer> r(new GradReducer(comm, pm, accum, options));
  const int W = pm.world_size();
  r->elem_ = dtype_size(dt);
  r->capacity_ = std::clamp<int64_t>(options.reduce_bucket_numel / W, 1, std::max<int64_t>(1, pm.total_shard_numel()));
  // One issued bucket (at most reduce_bucket_size elements) runs on while the next one fills. On the device both
  // are in stream order (the second bucket buffer is the compaction target of a partial bucket).
  r->max_pending_ = options.overlap_comm && !device ? 1 : 0;
  // Unit buffers: a tied embedding and a block accumulating at once.
  constexpr int kUnitBuffers = 2;
  const size_t unit_bytes = round64(size_t(pm.max_padded_numel()) * 4);
  const int buckets = device ? 2 : r->max_pending_ + 1;
  const size_t bucket_bytes = round64(size_t(W) * size_t(r->capacity_) * r->elem_);
  r->owner_.assign(size_t(kUnitBuffers), -1);
  r->unit_buffer_.assign(size_t(pm.num_units()), -1);
  r->buckets_.resize(size_t(buckets));
  if (device) {
    ZW_TRY(r->allocate_device(unit_bytes, bucket_bytes));
  } else {
    ZW_ASSIGN_OR_RETURN(r->unit_pool_, alloc_pinned_hugepage(unit_bytes * kUnitBuffers));
    for (int i = 0; i < kUnitBuffers; ++i)
      r->unit_buffers_.push_back(MemRef::host(r->unit_pool_.as<std::byte>() + unit_bytes * i, unit_bytes));
    ZW_ASSIGN_OR_RETURN(r->bucket_pool_, alloc_pinned_hugepage(bucket_bytes * size_t(buckets)));
    for (int i = 0; i < buckets; ++i)
      r->buckets_[i].buffer = MemRef::host(r->bucket_pool_.as<std::byte>() + bucket_bytes * i, bucket_bytes);
  }
  ZW_INFO(kZero,
          "grad reducer: buckets of %lld elements per rank (%lld in all) in %s, predivide %g, %d bucket buffers, "
          "up to %d reduce-scatters in flight",
          (long long)r->capacity_, (long long)(r->capacity_ * W), dtype_name(dt), options.predivide, buckets,
          r->max_pending_);
  return r;
}

GradReducer::~GradReducer() {
  for (int b : pending_) (void)buckets_[b].work.wait();  // the buffers must outlive the communicator's use of them
  for (Work& w : device_works_) (void)w.wait();
  if (options_.device != nullptr) (void)options_.device->synchronize(options_.device->comm());
}

Status GradReducer::allocate_device(size_t unit_bytes, size_t bucket_bytes) {
  EngineDevice& dev = *options_.device;
  constexpr int kUnitBuffers = 2;
  ZW_ASSIGN_OR_RETURN(device_units_, tensor::Buffer::allocate_device(unit_bytes * kUnitBuffers, dev.device()));
  for (int i = 0; i < kUnitBuffers; ++i) {
    unit_buffers_.push_back(device_units_.ref().slice(unit_bytes * size_t(i), unit_bytes));
    ZW_ASSIGN_OR_RETURN(DeviceEvent f, dev.make_event(false));
    ZW_ASSIGN_OR_RETURN(DeviceEvent p, dev.make_event(false));
    unit_final_.push_back(f);
    unit_packed_.push_back(p);
  }
  packed_pending_.assign(size_t(kUnitBuffers), false);
  ZW_ASSIGN_OR_RETURN(device_buckets_, tensor::Buffer::allocate_device(bucket_bytes * buckets_.size(), dev.device()));
  for (size_t i = 0; i < buckets_.size(); ++i) buckets_[i].buffer = device_buckets_.ref().slice(bucket_bytes * i,
                                                                                                  bucket_bytes);
  ZW_ASSIGN_OR_RETURN(reduced_, dev.make_event(false));
  return Status();
}

// Device: reduce-scatter the open bucket in place on the communication stream (compacted into the other bucket
// buffer when partial) and widen this rank's slice into the accumulator right behind it.
Status GradReducer::issue_device(Bucket& k) {
  EngineDevice& dev = *options_.device;
  const int W = pm_.world_size();
  const size_t part = size_t(k.filled) * elem_;
  MemRef buf = k.buffer;
  if (k.filled < capacity_) {
    buf = buckets_[size_t(1 - open_)].buffer;
    ZW_TRY(dev.copy_2d(buf.ptr, part, k.buffer.ptr, size_t(capacity_) * elem_, part, size_t(W), dev.comm()));
  }
  CollectiveOptions o;
  o.input = buf.slice(0, part * size_t(W));
  o.output = buf.slice(part * size_t(pm_.rank()), part);
  o.count = size_t(k.filled);
  o.dtype = options_.comm_dtype;
  o.op = ReduceOp::kSum;
  o.stream = dev.comm();
  int mark0 = -1;
  if (options_.spans != nullptr) {
    ZW_ASSIGN_OR_RETURN(mark0, options_.spans->mark(dev.comm()));
  }
  Result<Work> w = reduce_scatter(comm_, o);
  if (!w.ok()) return w.status().with_context("rank " + std::to_string(pm_.rank()) + ": gradient reduce-scatter");
  device_works_.push_back(std::move(w.value()));
  if (options_.spans != nullptr) {
    ZW_ASSIGN_OR_RETURN(const int mark1, options_.spans->mark(dev.comm()));
    options_.spans->collective(k.span, mark0, mark1);
  }
  float* accum = reinterpret_cast<float*>(accum_.data());
  for (const Entry& e : k.entries)
    ZW_TRY(dev.widen_add(o.output.data() + size_t(e.position) * elem_, options_.comm_dtype, e.numel,
                         accum + pm_.shard_offset(e.unit) + e.begin, dev.comm()));
  k.entries.clear();
  k.filled = 0;
  return Status();
}

// Device: the unit's gradients are final on the compute stream; pack them on the communication stream.
Status GradReducer::pack_device(int unit, int b) {
  EngineDevice& dev = *options_.device;
  ZW_TRY(dev.record(unit_final_[size_t(b)], dev.compute()));
  ZW_TRY(dev.wait(dev.comm(), unit_final_[size_t(b)]));
  const float* g = reinterpret_cast<const float*>(unit_buffers_[size_t(b)].data());
  const int64_t S = pm_.shard_numel(unit);
  const float scale = float(1.0 / options_.predivide);
  const int64_t issued_before = stats_.reduces;
  if (buckets_[open_].filled > 0 && buckets_[open_].filled + S > capacity_) ZW_TRY(issue());
  int pieces = 0;
  for (int64_t begin = 0; begin < S; ++pieces) {
    Bucket& k = buckets_[open_];
    const int64_t n = std::min(S - begin, capacity_ - k.filled);
    ZW_TRY(dev.pack(g + begin, S, pm_.world_size(), n, scale, options_.comm_dtype,
                    k.buffer.data() + size_t(k.filled) * elem_, capacity_, dev.comm()));
    k.entries.push_back(Entry{unit, begin, n, k.filled});
    k.filled += n;
    begin += n;
    if (k.filled == capacity_) ZW_TRY(issue());
  }
  if (pieces > 1) ++stats_.split_units;
  stats_.overlapped += stats_.reduces - issued_before;  // issued while backward goes on (the flush's is not)
  ZW_TRY(dev.record(unit_packed_[size_t(b)], dev.comm()));
  packed_pending_[size_t(b)] = true;
  return Status();
}

Status GradReducer::complete_front(bool blocking) {
  Bucket& k = buckets_[pending_.front()];
  pending_.pop_front();
  const auto t0 = std::chrono::steady_clock::now();
  Status s = k.work.wait();
  const auto t1 = std::chrono::steady_clock::now();
  stats_.wait_s += std::chrono::duration<double>(t1 - t0).count();
  if (options_.timeline) {
    auto ns = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    };
    if (blocking) options_.timeline->waited(k.span, ns(t0), ns(t1));
    options_.timeline->completed(k.span, k.work, ns(t1));
  }
  if (!s.ok()) {
    std::string units;
    for (const Entry& e : k.entries) units += (units.empty() ? "" : ", ") + pm_.unit(e.unit).name;
    return s.with_context("rank " + std::to_string(pm_.rank()) + ": reduce-scatter of the gradients of units " + units);
  }
  const std::byte* mine = k.buffer.data() + size_t(pm_.rank()) * size_t(k.filled) * elem_;
  float* accum = reinterpret_cast<float*>(accum_.data());
  for (const Entry& e : k.entries)
    widen_add(mine + size_t(e.position) * elem_, e.numel, options_.comm_dtype,
              accum + pm_.shard_offset(e.unit) + e.begin);
  k.entries.clear();
  k.filled = 0;
  return Status();
}

Status GradReducer::poll() {
  while (!pending_.empty() && buckets_[pending_.front()].work.test()) ZW_TRY(complete_front(/*blocking=*/false));
  return Status();
}

Result<MemRef> GradReducer::grads(int unit) {
  if (unit < 0 || unit >= pm_.num_units())
    return Status(Code::kInvalidArgument, "grad reducer: no unit " + std::to_string(unit));
  for (int b : pending_)
    if (!buckets_[b].counted && !buckets_[b].work.test()) {
      buckets_[b].counted = true;
      ++stats_.overlapped;
    }
  ZW_TRY(poll());
  const size_t bytes = size_t(pm_.unit(unit).padded_numel) * 4;
  if (unit_buffer_[unit] >= 0) return unit_buffers_[unit_buffer_[unit]].slice(0, bytes);
  if (options_.device != nullptr) {  // zeroed on the compute stream once its last packing is done
    const int b = int(std::find(owner_.begin(), owner_.end(), -1) - owner_.begin());
    if (b < pool_buffers()) {
      EngineDevice& dev = *options_.device;
      if (packed_pending_[size_t(b)]) ZW_TRY(dev.wait(dev.compute(), unit_packed_[size_t(b)]));
      packed_pending_[size_t(b)] = false;
      ZW_TRY(dev.zero(unit_buffers_[b].ptr, bytes, dev.compute()));
      owner_[b] = unit;
      unit_buffer_[unit] = b;
      return unit_buffers_[b].slice(0, bytes);
    }
  }
  const int b = int(std::find(owner_.begin(), owner_.end(), -1) - owner_.begin());
  if (b == pool_buffers())
    return Status(Code::kInvalidArgument, "grad reducer: rank " + std::to_string(pm_.rank()) + ": all " +
                                              std::to_string(pool_buffers()) +
                                              " gradient buffers are held by units "
                                              "whose gradients are not final; call reduce() for finished units first");
  owner_[b] = unit;
  unit_buffer_[unit] = b;
  std::memset(unit_buffers_[b].data(), 0, bytes);
  return unit_buffers_[b].slice(0, bytes);
}

void GradReducer::pack(int unit, const float* grads, int64_t begin, int64_t numel) {
  Bucket& k = buckets_[open_];
  const int64_t S = pm_.shard_numel(unit);
  const float scale = float(1.0 / options_.predivide);
  for (int q = 0; q < pm_.world_size(); ++q)
    narrow(grads + int64_t(q) * S + begin, numel, scale, options_.comm_dtype,
           k.buffer.data() + size_t(int64_t(q) * capacity_ + k.filled) * elem_);
  k.entries.push_back(Entry{unit, begin, numel, k.filled});
  k.filled += numel;
}

Status GradReducer::issue() {
  Bucket& k = buckets_[open_];
  if (k.filled == 0) return Status();
  const int W = pm_.world_size();
  const size_t part = size_t(k.filled) * elem_;
  if (options_.device != nullptr) {
    if (options_.timeline)
      k.span = options_.timeline->issued(SpanKind::kReduceScatter, k.entries.front().unit, int(k.entries.size()),
                                         int64_t(part) * W);
    ++stats_.reduces;
    stats_.reduced_bytes += int64_t(part) * W;
    return issue_device(k);
  }
  std::byte* base = k.buffer.data();
  if (k.filled < capacity_)  // compact rank q's part from q·C to q·filled (moving down, in increasing q)
    for (int q = 1; q < W; ++q)
      std::memmove(base + size_t(q) * part, base + size_t(q) * size_t(capacity_) * elem_, part);
  CollectiveOptions o;
  o.input = k.buffer.slice(0, part * size_t(W));
  o.output = k.buffer.slice(part * size_t(pm_.rank()), part);
  o.count = size_t(k.filled);
  o.dtype = options_.comm_dtype;
  o.op = ReduceOp::kSum;
  if (options_.timeline)
    k.span = options_.timeline->issued(SpanKind::kReduceScatter, k.entries.front().unit, int(k.entries.size()),
                                       int64_t(part) * W);
  ZW_ASSIGN_OR_RETURN(k.work, reduce_scatter(comm_, o));
  k.counted = false;
  pending_.push_back(open_);
  ++stats_.reduces;
  stats_.reduced_bytes += int64_t(part) * W;
  while (int(pending_.size()) > max_pending_) ZW_TRY(complete_front());
  stats_.max_in_flight = std::max(stats_.max_in_flight, int(pending_.size()));
  for (int b = 0; b < int(buckets_.size()); ++b)
    if (std::find(pending_.begin(), pending_.end(), b) == pending_.end()) {
      open_ = b;
      break;
    }
  buckets_[open_].entries.clear();
  buckets_[open_].filled = 0;
  return Status();
}

Status GradReducer::reduce(int unit) {
  if (unit < 0 || unit >= pm_.num_units() || unit_buffer_[unit] < 0)
    return Status(Code::kInvalidArgument, "grad reducer: reduce of unit " + std::to_string(unit) +
                                              " which has no gradient buffer this micro step; call grads() first");
  const int b = unit_buffer_[unit];
  if (options_.device != nullptr) {
    ZW_TRY(pack_device(unit, b));
    owner_[b] = -1;
    unit_buffer_[unit] = -1;
    return Status();
  }
  const float* g = reinterpret_cast<const float*>(unit_buffers_[b].data());
  const int64_t S = pm_.shard_numel(unit);
  // A unit that does not fit in what is left of the open bucket starts a new one; one larger than a bucket is cut.
  if (buckets_[open_].filled > 0 && buckets_[open_].filled + S > capacity_) ZW_TRY(issue());
  int pieces = 0;
  for (int64_t begin = 0; begin < S; ++pieces) {
    const int64_t n = std::min(S - begin, capacity_ - buckets_[open_].filled);
    pack(unit, g, begin, n);
    begin += n;
    if (buckets_[open_].filled == capacity_) ZW_TRY(issue());
  }
  if (pieces > 1) ++stats_.split_units;
  owner_[b] = -1;
  unit_buffer_[unit] = -1;
  return Status();
}

Status GradReducer::flush() {
  ZW_TRY(issue());
  while (!pending_.empty()) ZW_TRY(complete_front());
  if (options_.device != nullptr) {  // later compute (the optimizer step) reads the accumulator
    EngineDevice& dev = *options_.device;
    ZW_TRY(dev.record(reduced_, dev.comm()));
    ZW_TRY(dev.wait(dev.compute(), reduced_));
    std::vector<Work> works;
    works.swap(device_works_);
    const auto t0 = std::chrono::steady_clock::now();
    for (const Work& w : works) {
      Status s = w.wait();
      if (!s.ok()) return s.with_context("rank " + std::to_string(pm_.rank()) + ": a gradient reduce-scatter failed");
    }
    stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return Status();
}

}  // namespace zw::zero
