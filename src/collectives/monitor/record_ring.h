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

class RecordRing {
 public:
  // A ring of `capacity` records (rounded up to a power of two, at least 16). With `file` non-empty the ring is a
  // shared mapping of that file (created or truncated); otherwise anonymous memory.
  static Result<std::unique_ptr<RecordRing>> create(size_t capacity, const RingIdentity& who, const std::string& file);
  ~RecordRing();
  RecordRing(const RecordRing&) = delete;
  RecordRing& operator=(const RecordRing&) = delete;

  // Writer: starts the record of a new operation (state kRunning) and returns its slot index for finish().
  uint64_t begin(const OpFields& f);
  // Writer: completes the record begun as `index` (end time, state, status; with `start_ns` non-zero, the start time
  // too: the device path learns it only at the end). The finisher may be another thread than the beginner, provided
  // no two threads write one slot at once (the device path's consumer finishes records the issuer no longer touches).
  void finish(uint64_t index, uint64_t end_ns, OpState state, uint16_t status, uint64_t start_ns = 0);
  // Any thread: the issue of operation `seq` (one relaxed store).
  void note_enqueued(uint64_t seq) { header_->last_enqueued.store(seq, std::memory_order_relaxed); }
  // Writer: marks the ring as belonging to a failed communicator, with the reason (truncated).
  void mark_failed(const std::string& reason);

  // Any thread: the records now in the ring, oldest first (slots being rewritten are left out).
  std::vector<OpFields> snapshot() const;
  // Any thread: the record of the operation running now, if any.
  bool running(OpFields* out) const;

  const RingHeader& header() const { return *header_; }
  size_t capacity() const { return capacity_; }
  const std::string& file() const { return file_; }

 private:
  RecordRing() = default;
  // Copies slot i into *out; false when it was being written or is empty.
  bool read_slot(size_t i, OpFields* out) const;

  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  RingHeader* header_ = nullptr;
  RecordSlot* slots_ = nullptr;
  size_t capacity_ = 0;
  std::string file_;
};

// Packs/unpacks the small fields of a record (RecordSlot::packed).
uint64_t pack_fields(const OpFields& f);
void unpack_fields(uint64_t packed, OpFields* f);

}  // namespace zw::internal::monitor
