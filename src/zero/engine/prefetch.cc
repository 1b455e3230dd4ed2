// zero/engine/prefetch.cc — gather pool, unit states, lookahead prefetching and the order fingerprint check.
//
// Non-goals: see prefetch.h.
#include "zero/engine/prefetch.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>

#include "common/log.h"
#include "tensor/tensor.h"

namespace zw::zero {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t fnv1a(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Result<std::unique_ptr<PrefetchScheduler>> PrefetchScheduler::create(Communicator& comm, const PartitionManager& pm,
                                                                     MemRef source, const PrefetchOptions& options) {
  const DataType d = options.gather_dtype;
  if (d != DataType::kFloat32 && d != DataType::kFloat16 && d != DataType::kBFloat16)
    return Status(Code::kInvalidArgument,
                  std::string("prefetch: gather dtype must be float, half or bfloat16, got ") + dtype_name(d));
  if (source.kind != MemKind::kHost && options.device == nullptr)
    return Status(Code::kInvalidArgument, std::string("prefetch: the shard space is ") + mem_kind_name(source.kind) +
                                              " memory but no device was given; set PrefetchOptions::device");
  if (options.round_source && (options.device == nullptr || d == DataType::kFloat32 || source.kind == MemKind::kHost))
    return Status(Code::kInvalidArgument,
                  std::string("prefetch: round_source needs an f32 shard space in device memory and a 16-bit gather "
                              "dtype on a device; got ") +
                      mem_kind_name(source.kind) + " memory, gather dtype " + dtype_name(d) +
                      (options.device == nullptr ? ", no device" : ""));
  const size_t source_elem = options.round_source ? 4 : dtype_size(d);
  if (source.bytes < size_t(pm.total_shard_numel()) * source_elem)
    return Status(Code::kInvalidArgument, "prefetch: the source shard space holds " + std::to_string(source.bytes) +
                                              " bytes, rank " + std::to_string(pm.rank()) + " needs " +
                                              std::to_string(size_t(pm.total_shard_numel()) * source_elem));
  std::unique_ptr<PrefetchScheduler> s(new PrefetchScheduler(comm, pm, source, options));
  ZW_TRY(s->allocate());
  return s;
}

PrefetchScheduler::~PrefetchScheduler() {
  for (UnitState& u : units_)
    if (u.in_flight) (void)u.work.wait();  // the buffers must outlive the communicator's use of them
  for (Work& w : device_works_) (void)w.wait();
  if (options_.device != nullptr) (void)options_.device->synchronize(options_.device->comm());
}

Status PrefetchScheduler::allocate() {
  const int n = pm_.num_units();
  units_.resize(n);
  int64_t persistent_numel = 0;
  for (int u = 0; u < n; ++u) {
    const int64_t numel = pm_.unit(u).numel;
    if (numel <= options_.persistence_threshold && persistent_numel + numel <= options_.model_persistence_numel) {
      units_[u].persistent = true;
      persistent_numel += numel;
    }
  }
  int64_t max_unit = 0;  // the largest unit that goes through the shared pool
  int shared = 0;
  for (int u = 0; u < n; ++u)
    if (!units_[u].persistent) max_unit = std::max(max_unit, pm_.unit(u).padded_numel), ++shared;
  const int64_t k = shared == 0 ? 0
                                : std::clamp<int64_t>(options_.max_live_numel / std::max<int64_t>(1, max_unit), 2,
                                                      std::max(2, shared));
  const size_t gsize = dtype_size(options_.gather_dtype);
  const bool device = options_.device != nullptr;
  const bool convert = options_.gather_dtype != DataType::kFloat32 && !device;  // the device view is the gather
  auto slot_bytes = [&](int64_t numel) {
    const size_t b = size_t(numel) * gsize, c = convert ? size_t(numel) * 4 : 0;
    return (b + 63) / 64 * 64 + (c + 63) / 64 * 64;
  };
  size_t total = size_t(k) * slot_bytes(max_unit);
  for (int u = 0; u < n; ++u)
    if (units_[u].persistent) total += slot_bytes(pm_.unit(u).padded_numel);
  if (device) {
    ZW_TRY(allocate_device(total));
  } else if (std::strcmp(comm_.transport_name(), "shm") == 0 && total > 0) {
    ZW_ASSIGN_OR_RETURN(void* p, mem_alloc(total));  // whole 2 MiB, aligned, pre-faulted
    shared_pool_.reset(p);
    pool_base_ = static_cast<std::byte*>(p);
    pool_bytes_ = (total + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
  } else {
    ZW_ASSIGN_OR_RETURN(pool_, alloc_pinned_hugepage(total));
    pool_base_ = pool_.as<std::byte>();
    pool_bytes_ = pool_.mapped_bytes();
  }
  size_t used = 0;
  auto carve = [&](int64_t numel) {
    Slot s;
    s.gather = MemRef::host(pool_base_ + used, size_t(numel) * gsize);
    if (device) s.gather = device_pool_.ref().slice(used, size_t(numel) * gsize);
    used += (s.gather.bytes + 63) / 64 * 64;
    s.compute = s.gather;
    if (convert) {
      s.compute = MemRef::host(pool_base_ + used, size_t(numel) * 4);
      used += (s.compute.bytes + 63) / 64 * 64;
    }
    return s;
  };
  shared_slots_ = int(k);
  for (int64_t i = 0; i < k; ++i) slots_.push_back(carve(max_unit));
  for (int u = 0; u < n; ++u)
    if (units_[u].persistent) {
      units_[u].slot = int(slots_.size());
      slots_.push_back(carve(pm_.unit(u).padded_numel));
      slots_.back().unit = u;
    }
  if (device) {
    for (Slot& slot : slots_) {
      ZW_ASSIGN_OR_RETURN(slot.gathered, options_.device->make_event(false));
      ZW_ASSIGN_OR_RETURN(slot.released, options_.device->make_event(false));
    }
    ZW_ASSIGN_OR_RETURN(pass_start_, options_.device->make_event(false));
  }
  ZW_INFO(kZero, "prefetch: %lld gather buffers of %lld elements, %lld persistent units, %zu bytes of %s memory",
          (long long)k, (long long)max_unit, (long long)(slots_.size() - size_t(k)), total,
          device ? "device" : "host");
  return Status();
}

Status PrefetchScheduler::allocate_device(size_t total) {
  ZW_ASSIGN_OR_RETURN(device_pool_, tensor::Buffer::allocate_device(std::max<size_t>(total, 64),
                                                                     options_.device->device()));
  pool_base_ = device_pool_.ref().data();
  pool_bytes_ = device_pool_.bytes();
  return Status();
}

// Device: the gather runs on the communication stream after the buffer's previous unit was released by compute;
// a host source (offload_param) is first copied up into this rank's place of the buffer, and an f32 one
// (round_source) rounded into it, then gathered in place.
Status PrefetchScheduler::issue_device(UnitState& st, const CollectiveOptions& o, int unit) {
  EngineDevice& dev = *options_.device;
  Slot& slot = slots_[st.slot];
  if (slot.release_pending) {
    ZW_TRY(dev.wait(dev.comm(), slot.released));
    slot.release_pending = false;
  }
  CollectiveOptions g = o;
  g.stream = dev.comm();
  if (options_.round_source) {
    const size_t bytes = o.count * dtype_size(o.dtype);
    g.input = o.output.slice(size_t(pm_.rank()) * bytes, bytes);
    ZW_TRY(dev.pack(static_cast<const float*>(o.input.ptr), 0, 1, int64_t(o.count), 1.0f, o.dtype, g.input.ptr, 0,
                    dev.comm()));
  } else if (o.input.kind == MemKind::kHost) {
    g.input = o.output.slice(size_t(pm_.rank()) * o.input.bytes, o.input.bytes);
    ZW_TRY(dev.copy(g.input.ptr, o.input.ptr, o.input.bytes, dev.comm()));
  }
  int mark0 = -1;
  if (options_.spans != nullptr) {
    ZW_ASSIGN_OR_RETURN(mark0, options_.spans->mark(dev.comm()));
  }
  Result<Work> w = all_gather(comm_, g);
  if (!w.ok()) return w.status().with_context("rank " + std::to_string(pm_.rank()) + ": all-gather of unit " +
                                              pm_.unit(unit).name);
  st.work = std::move(w.value());
  if (options_.spans != nullptr) {
    ZW_ASSIGN_OR_RETURN(const int mark1, options_.spans->mark(dev.comm()));
    options_.spans->collective(st.span, mark0, mark1);
  }
  return dev.record(slot.gathered, dev.comm());
}

// Device: the host waits for the gathers the compute stream already waited for (errors, dead peers).
Status PrefetchScheduler::check_device_works() {
  std::vector<Work> works;
  works.swap(device_works_);
  for (const Work& w : works) {
    Status s = w.wait();
    if (!s.ok()) return s.with_context("rank " + std::to_string(pm_.rank()) + ": a parameter all-gather failed");
  }
  return Status();
}

Status PrefetchScheduler::check_fingerprint() {
  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv1a(h, order_.size());
  for (int u : order_) h = fnv1a(fnv1a(h, uint64_t(u)), uint64_t(pm_.unit(u).padded_numel));
  fingerprint_ = h;
  const int n = pm_.world_size();
  std::vector<int64_t> mine = {int64_t(h), int64_t(order_.size())}, all(2 * size_t(n));
  CollectiveOptions o;
  o.input = MemRef::host(mine.data(), 16);
  o.output = MemRef::host(all.data(), all.size() * 8);
  o.count = 2;
  o.dtype = DataType::kInt64;
  ZW_ASSIGN_OR_RETURN(Work w, all_gather(comm_, o));
  ZW_TRY(w.wait());
  std::map<std::pair<int64_t, int64_t>, std::vector<int>> groups;
  for (int r = 0; r < n; ++r) groups[{all[2 * r], all[2 * r + 1]}].push_back(r);
  if (groups.size() == 1) return Status();
  std::string msg = "zero-3 unit order differs across ranks:";
  for (const auto& [key, ranks] : groups) {
    msg += " rank" + std::string(ranks.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (i > 0) msg += ",";
      msg += std::to_string(ranks[i]);
    }
    msg += " have order fingerprint " + hex(uint64_t(key.first)) + " (" + std::to_string(key.second) + " uses);";
  }
  msg += " this is rank " + std::to_string(pm_.rank()) +
         "; every rank must run the same model code and declare the same unit order (check for rank-dependent "
         "control flow in forward/backward)";
  return Status(Code::kDesync, msg);
}

Status PrefetchScheduler::declare_order(std::vector<int> order) {
  for (int u : order)
    if (u < 0 || u >= pm_.num_units())
      return Status(Code::kInvalidArgument, "prefetch: declared order names unit " + std::to_string(u) +
                                                " but there are " + std::to_string(pm_.num_units()));
  order_ = std::move(order);
  return check_fingerprint();
}

Status PrefetchScheduler::begin_pass(bool scheduled) {
  if (in_pass_) return Status(Code::kInvalidArgument, "prefetch: begin_pass while a pass is running; call end_pass");
  in_pass_ = true;
  scheduled_ = scheduled;
  recording_ = scheduled && order_.empty();
  recorded_.clear();
  events_.clear();
  for (UnitState& u : units_) u.event = -1;  // events of earlier passes are gone
  position_ = 0;
  if (options_.device != nullptr) {  // this pass's gathers follow what compute queued before it (new weights)
    ZW_TRY(options_.device->record(pass_start_, options_.device->compute()));
    ZW_TRY(options_.device->wait(options_.device->comm(), pass_start_));
  }
  return Status();
}

int PrefetchScheduler::next_use(int unit, int from) const {
  if (!scheduled_ || recording_) return -1;
  for (size_t q = size_t(std::max(0, from)); q < order_.size(); ++q)
    if (order_[q] == unit) return int(q);
  return -1;
}

// DeepSpeed's __params_to_release: walk the uses from the next one on, summing their elements until the sum reaches
// max_reuse_distance; the unit is kept when it is met on the walk and the pool can hold it until then.
bool PrefetchScheduler::keep_for_reuse(int unit) const {
  if (!scheduled_ || recording_) return false;
  int64_t traversed = 0;
  for (size_t q = size_t(position_); q < order_.size(); ++q) {
    if (traversed >= options_.max_reuse_numel) return false;
    if (order_[q] == unit) return int(q) - position_ < pool_buffers() - 1;
    traversed += pm_.unit(order_[q]).numel;
  }
  return false;
}

int PrefetchScheduler::free_slot() const {
  for (int i = 0; i < shared_slots_; ++i)
    if (slots_[i].unit < 0) return i;
  return -1;
}

Status PrefetchScheduler::issue(int unit, bool prefetch) {
  UnitState& st = units_[unit];
  if (!st.persistent) {
    const int slot = free_slot();
    if (slot < 0) return Status(Code::kInternal, "prefetch: no free gather buffer for unit " + pm_.unit(unit).name);
    st.slot = slot;
    slots_[slot].unit = unit;
    int in_use = 0;
    for (int i = 0; i < shared_slots_; ++i) in_use += slots_[i].unit >= 0 ? 1 : 0;
    stats_.peak_in_use = std::max(stats_.peak_in_use, in_use);
  }
  const int64_t S = pm_.shard_numel(unit);
  const size_t g = dtype_size(options_.gather_dtype);
  CollectiveOptions o;
  const size_t sg = options_.round_source ? 4 : g;  // the source's element size
  o.input = source_.slice(size_t(pm_.shard_offset(unit)) * sg, size_t(S) * sg);
  o.output = slots_[st.slot].gather.slice(0, size_t(pm_.unit(unit).padded_numel) * g);
  o.count = size_t(S);
  o.dtype = options_.gather_dtype;
  if (options_.timeline) st.span = options_.timeline->issued(SpanKind::kAllGather, unit, 1, int64_t(o.output.bytes));
  if (options_.device != nullptr) {
    ZW_TRY(issue_device(st, o, unit));
  } else {
    ZW_ASSIGN_OR_RETURN(st.work, all_gather(comm_, o));
  }
  st.in_flight = true;
  st.ready = false;
  st.event = int(events_.size());
  // A prefetch is issued while use #position_ - 1 runs (acquire has advanced the counter); on demand, at its use.
  events_.push_back(GatherEvent{unit, -1, prefetch ? position_ - 1 : position_, prefetch, now_ns(), 0});
  ++stats_.gathers;
  if (st.persistent) ++stats_.persistent_gathers;
  ++(prefetch ? stats_.prefetched : stats_.on_demand);
  return Status();
}

Status PrefetchScheduler::wait_ready(int unit) {
  UnitState& st = units_[unit];
  if (st.ready) return Status();
  const int64_t t0 = now_ns();
  const Slot& slot = slots_[st.slot];
  if (options_.device != nullptr) {  // the compute stream waits for the gather; the host checks it at end_pass
    ZW_TRY(options_.device->wait(options_.device->compute(), slot.gathered));
    device_works_.push_back(st.work);
    st.in_flight = false;
  } else {
    Status s = wait_gather(st);
    if (!s.ok())
      return s.with_context("rank " + std::to_string(pm_.rank()) + ": all-gather of unit " + pm_.unit(unit).name);
  }
  if (options_.gather_dtype != DataType::kFloat32 && options_.device == nullptr) {
    const int64_t n = pm_.unit(unit).padded_numel;
    const tensor::Shape shape{n};
    ZW_TRY(tensor::convert(tensor::Tensor{slot.gather.slice(0, size_t(n) * 2), options_.gather_dtype, shape},
                           tensor::Tensor{slot.compute.slice(0, size_t(n) * 4), DataType::kFloat32, shape}));
  }
  st.ready = true;
  const int64_t t1 = now_ns();
  stats_.wait_s += double(t1 - t0) * 1e-9;
  if (st.event >= 0) events_[st.event].ready_ns = t1;
  return Status();
}

// Waits for the unit's gather (in flight) and records the wait and its completion in the timeline.
Status PrefetchScheduler::wait_gather(UnitState& st) {
  const int64_t t0 = options_.timeline ? now_ns() : 0;
  Status s = st.work.wait();
  st.in_flight = false;
  if (options_.timeline) {
    const int64_t t1 = now_ns();
    options_.timeline->waited(st.span, t0, t1);
    options_.timeline->completed(st.span, st.work, t1);
  }
  return s;
}

Status PrefetchScheduler::drop(int unit) {
  UnitState& st = units_[unit];
  if (st.in_flight && options_.device != nullptr) {
    device_works_.push_back(st.work);  // a later gather into its buffer follows it on the communication stream
    st.in_flight = false;
  }
  if (st.in_flight) ZW_TRY(wait_gather(st));
  st.in_flight = st.ready = false;
  if (options_.device != nullptr && st.slot >= 0) {
    Slot& slot = slots_[st.slot];
    if (options_.poison_released && !st.persistent)
      ZW_TRY(options_.device->fill_nan(slot.gather.ptr, options_.gather_dtype,
                                       int64_t(slot.gather.bytes / dtype_size(options_.gather_dtype)),
                                       options_.device->compute()));
    ZW_TRY(options_.device->record(slot.released, options_.device->compute()));
    slot.release_pending = true;
  }
  if (!st.persistent && st.slot >= 0) {
    if (options_.poison_released && options_.device == nullptr) {
      const MemRef c = slots_[st.slot].compute;
      std::fill_n(reinterpret_cast<float*>(c.data()), c.bytes / 4, std::numeric_limits<float>::quiet_NaN());
    }
    slots_[st.slot].unit = -1;
    st.slot = -1;
  }
  return Status();
}

// Frees a buffer for an on-demand gather by dropping the resident, unheld unit needed last.
Status PrefetchScheduler::make_room() {
  int victim = -1, victim_next = -1;
  for (int u = 0; u < int(units_.size()); ++u) {
    const UnitState& st = units_[u];
    if (st.persistent || st.slot < 0 || st.held) continue;
    int q = next_use(u, position_);
    if (q < 0) q = INT32_MAX;
    if (victim < 0 || q > victim_next) victim = u, victim_next = q;
  }
  if (victim < 0)
    return Status(Code::kInvalidArgument, "prefetch: all " + std::to_string(pool_buffers()) +
                                              " gather buffers hold units in use; release units before acquiring "
                                              "more, or raise stage3_max_live_parameters");
  ++stats_.evicted;
  return drop(victim);
}

Status PrefetchScheduler::prefetch_ahead() {
  if (!scheduled_ || recording_ || options_.prefetch_bucket_numel <= 0) return Status();
  int64_t ahead = 0;
  for (size_t q = size_t(position_); q < order_.size(); ++q) {
    const int u = order_[q];
    UnitState& st = units_[u];
    if (st.persistent) {
      if (!st.ready && !st.in_flight) ZW_TRY(issue(u, true));
      continue;
    }
    if (st.slot >= 0) continue;  // resident or in flight already
    // DeepSpeed's rule: units are added while fewer than stage3_prefetch_bucket_size elements are on the way, so the
    // next unit is always prefetched, even one larger than the bucket (a 1.3B GPT-2 block is 50.4M elements, the
    // default bucket 5e7).
    if (ahead >= options_.prefetch_bucket_numel || free_slot() < 0) break;
    ahead += pm_.unit(u).padded_numel;
    ZW_TRY(issue(u, true));
  }
  return Status();
}

Result<MemRef> PrefetchScheduler::acquire(int unit) {
  if (!in_pass_) return Status(Code::kInvalidArgument, "prefetch: acquire outside a pass; call begin_pass first");
  if (unit < 0 || unit >= pm_.num_units())
    return Status(Code::kInvalidArgument, "prefetch: no unit " + std::to_string(unit));
  UnitState& st = units_[unit];
  if (st.held) return Status(Code::kInvalidArgument, "prefetch: unit " + pm_.unit(unit).name + " is already held");
  if (recording_) recorded_.push_back(unit);
  if (scheduled_ && !recording_) {
    if (size_t(position_) >= order_.size() || order_[position_] != unit)
      return Status(Code::kInvalidArgument,
                    "prefetch: rank " + std::to_string(pm_.rank()) + " asked for unit " + pm_.unit(unit).name +
                        " as use #" + std::to_string(position_) + " but the recorded order has " +
                        (size_t(position_) < order_.size() ? pm_.unit(order_[position_]).name : "no more uses") +
                        "; ZeRO-3 prefetching needs the same unit order in every training micro step");
  }
  if (!st.ready && !st.in_flight) {
    if (!st.persistent && free_slot() < 0) ZW_TRY(make_room());
    ZW_TRY(issue(unit, false));
  }
  const int use_position = position_;
  ++position_;
  ZW_TRY(prefetch_ahead());  // issued after this unit's gather, so the communicator runs this one first
  ZW_TRY(wait_ready(unit));
  if (st.event >= 0 && events_[st.event].use_position < 0) events_[st.event].use_position = use_position;
  st.held = true;
  const size_t elem = options_.device != nullptr ? dtype_size(options_.gather_dtype) : 4;
  return slots_[st.slot].compute.slice(0, size_t(pm_.unit(unit).padded_numel) * elem);
}

Status PrefetchScheduler::release(int unit) {
  if (unit < 0 || unit >= pm_.num_units() || !units_[unit].held)
    return Status(Code::kInvalidArgument, "prefetch: release of unit " + std::to_string(unit) + " that is not held");
  UnitState& st = units_[unit];
  st.held = false;
  if (!st.persistent) {
    if (keep_for_reuse(unit)) {
      ++stats_.kept_for_reuse;
    } else {
      ZW_TRY(drop(unit));
    }
  }
  return prefetch_ahead();
}

Status PrefetchScheduler::end_pass() {
  if (!in_pass_) return Status(Code::kInvalidArgument, "prefetch: end_pass without begin_pass");
  in_pass_ = false;
  for (int u = 0; u < int(units_.size()); ++u)
    if (units_[u].held)
      return Status(Code::kInvalidArgument, "prefetch: unit " + pm_.unit(u).name + " still held at the end of a pass");
  if (options_.device != nullptr) ZW_TRY(check_device_works());
  if (recording_) {
    recording_ = false;
    order_ = recorded_;
    return check_fingerprint();
  }
  if (scheduled_ && size_t(position_) != order_.size())
    return Status(Code::kInvalidArgument,
                  "prefetch: rank " + std::to_string(pm_.rank()) + " used " + std::to_string(position_) +
                      " units in a training micro step, the order has " + std::to_string(order_.size()));
  return Status();
}

Status PrefetchScheduler::invalidate() {
  if (in_pass_) return Status(Code::kInvalidArgument, "prefetch: invalidate during a pass");
  for (int u = 0; u < int(units_.size()); ++u) ZW_TRY(drop(u));
  if (options_.device != nullptr) ZW_TRY(check_device_works());
  return Status();
}

}  // namespace zw::zero
