// collectives/monitor/record_ring.h — a communicator's last operations, in a fixed-size ring of OpRecords.
//
// Storage is allocated once: anonymous memory, or (flight recorder, ZW_FLIGHT_DIR) a shared mapping of a file, so
// that the records of a process that is killed or stopped can still be read by tools/zw_flight. Writing allocates
// nothing and takes no lock.
//
// Threading: one writer of a slot at a time (host path: the holder of the communicator's run token, ordered by the
// communicator's mutex; device path: the issuer begins, the consumer finishes, device_ops.h). Any thread may read with
// snapshot(): each slot is a seqlock, and a slot that changes while it is copied is skipped. Non-goals: more than one
// concurrent writer, resizing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/monitor/op_record.h"
#include "collectives/monitor/op_stats.h"
#include "zerowire/status.h"

namespace zw::internal::monitor {

// Who a ring belongs to (written into its header).
struct RingIdentity {
  int rank = 0;
  int size = 1;
  uint32_t generation = 0;
  std::string host;
  std::string comm;
  std::string transport;
};

// Whether this CPU executes PREFETCHW (CPUID 0x80000001 ECX bit 8: Intel since Broadwell, AMD): fetching a line for
// writing takes it from another core's cache as well (the counting thread reads every record, so a slot's line sits
// shared there when the writer comes back to it a lap later). __builtin_prefetch(p, 1) emits a read prefetch unless the
// whole build targets such a CPU, and a read prefetch leaves the invalidation to the store itself.
bool cpu_has_prefetchw();

// Fetches the line at p for writing.
inline void prefetch_for_write(const void* p, bool prefetchw) {
#if defined(__x86_64__)
  if (prefetchw) {
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
    return;
  }
#endif
  (void)prefetchw;
  __builtin_prefetch(p, 1);
}

// What writing a record touches: the writer of the host path keeps a copy of it on its own line (CommMonitor), so that
// an operation's hooks load that one line and store into the ring, without loading the ring object and its header
// first — between two operations a rank waits for its peers and the lines go cold (bench/monitor/hook_cost.cc,
// cold-l2). The writer counts the records itself, and stores into the record's line only: no header word is kept up
// to date per operation (each such line cost the 2-rank 4 KiB all-gather about a point, docs/PERF.md).
struct RingWriter {
  RecordSlot* slots = nullptr;
  unsigned capacity_log2 = 0;
  bool prefetchw = false;  // the CPU has PREFETCHW (cpu_has_prefetchw)

  // Starts record `index` (state kRunning); returns the packed fields it wrote, for finish().
  inline uint64_t begin(uint64_t index, const OpFields& f) const;
  // Completes record `index`, begun with `packed` (the arguments as RecordRing::finish's).
  inline void finish(uint64_t index, uint64_t packed, uint64_t end_ns, OpState state, uint16_t status,
                     uint64_t start_ns = 0, uint8_t flags = 0) const;
};

class RecordRing {
 public:
  // A ring of `capacity` records (rounded up to a power of two, at least 16). With `file` non-empty the ring is a
  // shared mapping of that file (created or truncated); otherwise anonymous memory.
  static Result<std::unique_ptr<RecordRing>> create(size_t capacity, const RingIdentity& who, const std::string& file);
  ~RecordRing();
  RecordRing(const RecordRing&) = delete;
  RecordRing& operator=(const RecordRing&) = delete;

  // Writer: starts record `index` (state kRunning): the writer numbers its records 0, 1, 2, ... (its own count; see
  // begun()).
  void begin(uint64_t index, const OpFields& f) { writer().begin(index, f); }
  // Writer: completes the record begun as `index` (end time, state, status; with `start_ns` non-zero, the start time
  // too: the device path learns it only at the end; `flags` as OpFields::flags). The finisher may be another thread
  // than the beginner, provided no two threads write one slot at once (the device path's consumer finishes records the
  // issuer no longer touches).
  inline void finish(uint64_t index, uint64_t end_ns, OpState state, uint16_t status, uint64_t start_ns = 0,
                     uint8_t flags = 0);
  // Any thread: the issue of operation `seq` (one relaxed store).
  void note_enqueued(uint64_t seq) { header_->last_enqueued.store(seq, std::memory_order_relaxed); }
  // The word note_enqueued stores, for an issuer that keeps its address (CommMonitor::on_enqueue).
  std::atomic<uint64_t>* enqueued_word() { return &header_->last_enqueued; }
  // Writer: marks the ring as belonging to a failed communicator, with the reason (truncated).
  void mark_failed(const std::string& reason);

  // Any thread: how many records were begun, found from the slots' versions (the writer keeps no count in the ring):
  // record i has begun exactly when its slot holds round i / capacity or a later one, which is true of a prefix of
  // the indices, so a gallop from the last answer finds the end in O(log) slot reads.
  uint64_t begun() const;
  // Any thread: the records now in the ring, oldest first (slots being rewritten are left out).
  std::vector<OpFields> snapshot() const;
  // Any thread: the record of the operation running now, if any.
  bool running(OpFields* out) const;
  // Any thread: the sequence number through which a writer that runs its operations one at a time in sequence order
  // (the host path) has finished them: the newest record's, less one while it runs; 0 before the first record. The
  // writer keeps no such word up to date: the newest record answers it.
  uint64_t finished_through() const;
  // Any thread: record `index` (counting from 0, as begun()) if it is finished; kUnfinished while
  // it runs or is being written, kGone once its slot holds a later record.
  enum class Read { kFinished, kUnfinished, kGone };
  Read read_finished(uint64_t index, OpFields* out) const;

  // The writer's view (see RingWriter); begin/finish below go through it.
  const RingWriter& writer() const { return writer_; }
  const RingHeader& header() const { return *header_; }
  size_t capacity() const { return capacity_; }
  const std::string& file() const { return file_; }

 private:
  RecordRing() = default;
  // Copies slot i into *out (and its version into *version); false when it was being written or is empty.
  bool read_slot(size_t i, OpFields* out, uint64_t* version = nullptr) const;
  // Whether record `index` has begun (its slot holds its round or a later one).
  bool has_begun(uint64_t index) const;

  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  RingHeader* header_ = nullptr;
  RecordSlot* slots_ = nullptr;
  size_t capacity_ = 0;
  unsigned capacity_log2_ = 0;  // capacity_ == 1 << capacity_log2_
  std::string file_;
  RingWriter writer_;  // slots_, capacity_log2_ and the CPU's prefetch, for begin/finish
  mutable std::atomic<uint64_t> begun_hint_{0};  // the last answer of begun() (readers only)
};

// A slot's words, copied between two loads of its version (the readers' side of the seqlock).
struct SlotCopy {
  uint64_t version, seq, coll_root, count, enqueue_ns, start_ns, end_ns, packed;
};
// Copies `s`; false when its version changed during the copy (the writer was in it).
inline bool copy_slot(const RecordSlot& s, SlotCopy* c) {
  c->version = s.version.load(std::memory_order_acquire);
  c->seq = s.seq.load(std::memory_order_relaxed);
  c->coll_root = s.coll_root.load(std::memory_order_relaxed);
  c->count = s.count.load(std::memory_order_relaxed);
  c->enqueue_ns = s.enqueue_ns.load(std::memory_order_relaxed);
  c->start_ns = s.start_ns.load(std::memory_order_relaxed);
  c->end_ns = s.end_ns.load(std::memory_order_relaxed);
  c->packed = s.packed.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return s.version.load(std::memory_order_relaxed) == c->version;
}

// Packs/unpacks the small fields of a record (RecordSlot::packed).
inline uint64_t pack_fields(const OpFields& f) {
  return uint64_t(f.kind) | uint64_t(f.algo) << 8 | uint64_t(f.dtype) << 16 | uint64_t(f.redop) << 24 |
         uint64_t((f.state & 0xF) | f.flags << 4) << 32 | uint64_t(f.status) << 40 | uint64_t(f.path) << 56;
}
inline void unpack_fields(uint64_t p, OpFields* f) {
  f->kind = uint8_t(p);
  f->algo = uint8_t(p >> 8);
  f->dtype = uint8_t(p >> 16);
  f->redop = uint8_t(p >> 24);
  f->state = uint8_t(p >> 32) & 0xF;
  f->flags = uint8_t(p >> 36) & 0xF;
  f->status = uint16_t(p >> 40);
  f->path = uint8_t(p >> 56);
}
inline uint64_t pack_coll_root(uint64_t coll_index, uint32_t root) {
  return (coll_index & ((uint64_t{1} << kCollIndexBits) - 1)) | uint64_t(root) << kCollIndexBits;
}
// The fields of a copied slot, of a ring whose communicator has `size` ranks (the bytes are computed from the count).
inline void fields_of(const SlotCopy& c, int size, OpFields* out) {
  out->seq = c.seq;
  out->coll_index = c.coll_root & ((uint64_t{1} << kCollIndexBits) - 1);
  out->root = static_cast<uint32_t>(c.coll_root >> kCollIndexBits);
  out->count = c.count;
  out->enqueue_ns = c.enqueue_ns;
  out->start_ns = c.start_ns;
  out->end_ns = c.end_ns;
  unpack_fields(c.packed, out);
  out->bytes = op_bytes(static_cast<OpKind>(out->kind), static_cast<DataType>(out->dtype), c.count, size);
}

// The writer's calls, inline: they run on every operation's path.
inline uint64_t RingWriter::begin(uint64_t index, const OpFields& f) const {
  const uint64_t mask = (uint64_t{1} << capacity_log2) - 1;
  RecordSlot& s = slots[index & mask];
  // The slot's version without reading it (the load of a line last touched `capacity` operations ago stalled the
  // writer): round r of a slot writes 4r+1..4r+2 here and 4r+3..4r+4 in finish(), always above the last round's.
  const uint64_t v = (index >> capacity_log2) << 2;
  s.version.store(v + 1, std::memory_order_relaxed);  // odd: readers skip the slot
  std::atomic_thread_fence(std::memory_order_release);
  s.seq.store(f.seq, std::memory_order_relaxed);
  s.coll_root.store(pack_coll_root(f.coll_index, f.root), std::memory_order_relaxed);
  s.count.store(f.count, std::memory_order_relaxed);
  s.enqueue_ns.store(f.enqueue_ns, std::memory_order_relaxed);
  s.start_ns.store(f.start_ns, std::memory_order_relaxed);
  s.end_ns.store(0, std::memory_order_relaxed);
  const uint64_t packed = (pack_fields(f) & ~(uint64_t{0xFFFFFF} << 32)) | uint64_t(OpState::kRunning) << 32;
  s.packed.store(packed, std::memory_order_relaxed);
  s.version.store(v + 2, std::memory_order_release);
  // The next operation's slot, for writing: it is fetched while this operation runs, not when the next one begins
  // (a slot is touched once per `capacity` operations, and the counting thread has read it since).
  prefetch_for_write(&slots[(index + 1) & mask], prefetchw);
  return packed;
}

inline void RingWriter::finish(uint64_t index, uint64_t packed, uint64_t end_ns, OpState state, uint16_t status,
                               uint64_t start_ns, uint8_t flags) const {
  RecordSlot& s = slots[index & ((uint64_t{1} << capacity_log2) - 1)];
  const uint64_t v = ((index >> capacity_log2) << 2) + 2;
  s.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.end_ns.store(end_ns, std::memory_order_relaxed);
  if (start_ns != 0) s.start_ns.store(start_ns, std::memory_order_relaxed);
  packed = (packed & ~(uint64_t{0xFFFFFF} << 32)) | uint64_t((uint8_t(state) & 0xF) | (flags & 0xF) << 4) << 32 |
           uint64_t(status) << 40;
  s.packed.store(packed, std::memory_order_relaxed);
  s.version.store(v + 2, std::memory_order_release);
}

// Inline: the counting thread reads every record through it.
inline RecordRing::Read RecordRing::read_finished(uint64_t index, OpFields* out) const {
  // Round r of a slot is 4r+1..4r+2 once begun and 4r+4 once finished (begin/finish above).
  const uint64_t finished = ((index >> capacity_log2_) << 2) + 4;
  const RecordSlot& s = slots_[index & (capacity_ - 1)];
  const uint64_t v = s.version.load(std::memory_order_acquire);
  if (v != finished) return v > finished ? Read::kGone : Read::kUnfinished;
  // A finished record changes only when the next round begins: a copy that overlapped that is gone.
  SlotCopy c;
  if (!copy_slot(s, &c) || c.version != finished) return Read::kGone;
  fields_of(c, header_->size, out);
  return Read::kFinished;
}

inline void RecordRing::finish(uint64_t index, uint64_t end_ns, OpState state, uint16_t status, uint64_t start_ns,
                               uint8_t flags) {
  const uint64_t packed = slots_[index & (capacity_ - 1)].packed.load(std::memory_order_relaxed);
  writer().finish(index, packed, end_ns, state, status, start_ns, flags);
}

}  // namespace zw::internal::monitor
