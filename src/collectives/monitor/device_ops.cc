// The device path's records: issuer (begin/commit) and consumer (consume) of device_ops.h.
#include "collectives/monitor/device_ops.h"

#include <algorithm>

namespace zw::internal::monitor {

const char* device_algo_name(uint8_t algo) {
  switch (static_cast<DeviceAlgo>(algo)) {
    case DeviceAlgo::kDirect:
      return "direct";
    case DeviceAlgo::kRing:
      return "ring";
    case DeviceAlgo::kCopyEngine:
      return "copy_engine";
  }
  return "unknown";
}

Result<std::unique_ptr<DeviceOps>> DeviceOps::create(size_t capacity, const RingIdentity& who,
                                                     const std::string& file) {
  std::unique_ptr<DeviceOps> ops(new DeviceOps());
  auto ring = RecordRing::create(capacity, who, file);
  if (!ring.ok()) return ring.status();
  ops->ring_ = std::move(ring.value());
  ops->pending_.reset(new Pending[ops->ring_->capacity()]);
  return ops;
}

size_t DeviceOps::begin(const OpDesc& desc, DeviceAlgo algo, uint64_t seq, int world_size, int64_t enqueue_ns) {
  const uint64_t index = begun_;
  if (index - finished_.load(std::memory_order_acquire) >= ring_->capacity()) {
    untracked_.store(untracked_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return kNoSlot;
  }
  const size_t slot = static_cast<size_t>(index & (ring_->capacity() - 1));
  Pending& p = pending_[slot];
  p.seq = seq;
  p.bytes = op_bytes(desc, world_size);
  p.enqueue_ns = enqueue_ns;
  p.failed_ns = 0;
  p.issue_code = 0;
  p.kind = desc.kind;
  p.algo = static_cast<uint8_t>(algo);
  OpFields f;
  f.seq = seq;
  f.coll_index = seq > 0 ? seq - 1 : 0;
  f.bytes = p.bytes;
  f.count = desc.count;
  f.enqueue_ns = static_cast<uint64_t>(enqueue_ns);
  f.start_ns = static_cast<uint64_t>(enqueue_ns);  // until the device says when the stream reached it
  f.kind = static_cast<uint8_t>(desc.kind);
  f.algo = p.algo;
  f.dtype = static_cast<uint8_t>(desc.dtype);
  f.redop = static_cast<uint8_t>(desc.op);
  f.path = static_cast<uint8_t>(PathKind::kDevice);
  f.root = desc.root;
  ring_->note_enqueued(seq);
  ring_->begin(index, f);
  begun_ = index + 1;
  return slot;
}

void DeviceOps::commit(size_t slot, const Status& status, int64_t now_ns) {
  if (slot == kNoSlot) return;
  Pending& p = pending_[slot];
  if (!status.ok()) {
    p.issue_code = static_cast<uint16_t>(status.code() == Code::kOk ? Code::kInternal : status.code());
    p.failed_ns = now_ns;
    ring_->mark_failed(status.message());
  }
  committed_.store(begun_, std::memory_order_release);
}

uint64_t DeviceOps::in_flight() const {
  const uint64_t begun = committed_.load(std::memory_order_acquire);
  const uint64_t done = finished_.load(std::memory_order_relaxed);
  return begun > done ? begun - done : 0;
}

void DeviceOps::finish(uint64_t index, const Pending& p, uint64_t start_ns, uint64_t end_ns, OpState state,
                       uint16_t code, bool timed) {
  ring_->finish(index, end_ns, state, code, start_ns, timed ? 0 : kRecordUntimed);
  const uint64_t ns = end_ns > start_ns ? end_ns - start_ns : 0;
  stats_.add(p.kind, static_cast<Algo>(p.algo), p.bytes, ns, ns, state == OpState::kFailed, timed);
}

uint64_t DeviceOps::reached_until(DeviceOpSource& source, uint64_t from, uint64_t committed) const {
  // Bisection over [lo, hi): every record before lo is reached, none from hi on. The first probe is the newest
  // record, which settles the common case (the device caught up between two passes) with one query.
  uint64_t lo = from, hi = committed;
  bool newest = true;
  while (lo < hi) {
    const uint64_t mid = newest ? hi - 1 : lo + (hi - lo) / 2;
    newest = false;
    uint64_t j = mid + 1;  // the record at or below mid to ask about: one that reached the device
    while (j > lo && pending_[static_cast<size_t>((j - 1) & (ring_->capacity() - 1))].issue_code != 0) --j;
    if (j == lo) {  // [lo, mid] were all refused at issue
      lo = mid + 1;
      continue;
    }
    const uint64_t probe = j - 1;
    const size_t slot = static_cast<size_t>(probe & (ring_->capacity() - 1));
    if (source.reached(slot, pending_[slot].seq))
      lo = mid + 1;  // and (probe, mid] were refused at issue
    else
      hi = probe;
  }
  return lo;
}

size_t DeviceOps::consume(DeviceOpSource& source) {
  const uint64_t committed = committed_.load(std::memory_order_acquire);
  uint64_t i = finished_.load(std::memory_order_relaxed);
  const uint64_t first = i;
  if (i == committed) return 0;
  source.refresh();
  const uint64_t reached = reached_until(source, i, committed);
  for (; i < reached; ++i) {
    const size_t slot = static_cast<size_t>(i & (ring_->capacity() - 1));
    const Pending& p = pending_[slot];
    const uint64_t enq = static_cast<uint64_t>(p.enqueue_ns);
    if (p.issue_code != 0) {
      finish(i, p, enq, std::max(enq, static_cast<uint64_t>(p.failed_ns)), OpState::kFailed, p.issue_code);
      continue;
    }
    const DeviceCompletion c = source.completion(slot, p.seq);
    if (c.state == DeviceCompletion::State::kPending) break;  // a source that broke the order: ask again next pass
    // The device's times come through a clock anchor with a few µs of error: keep enqueue <= start <= end.
    const uint64_t start = std::max(enq, c.start_ns);
    const uint64_t end = start + (c.end_ns > c.start_ns ? c.end_ns - c.start_ns : 0);
    const bool failed = c.state == DeviceCompletion::State::kFailed;
    if (failed && ring_->header().failed.load(std::memory_order_relaxed) == 0)
      ring_->mark_failed("GPU operation " + std::to_string(p.seq) +
                         " failed on the device: " + code_name(static_cast<Code>(c.code)));
    finish(i, p, start, end, failed ? OpState::kFailed : OpState::kDone, failed ? c.code : 0, c.timed);
  }
  finished_.store(i, std::memory_order_release);
  return static_cast<size_t>(i - first);
}

}  // namespace zw::internal::monitor
