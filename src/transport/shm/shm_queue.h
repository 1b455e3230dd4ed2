// The shm transport's shared-memory segment: one per rank, holding a header with a futex doorbell and one
// inbound single-producer/single-consumer ring of fixed-size message slots per peer (peer -> owner).
//
// Layout (all offsets fixed by the world size, so every rank computes the same ones):
//   [SegmentHeader][RingControl x world_size][pad to 4 KiB][ShmSlot x kRingSlots x world_size]
// Ring r carries messages from rank r to the owner; the owner's own ring is unused. Shared fields are plain
// integers accessed only through std::atomic_ref (lock-free, so valid across processes); the producer
// publishes a slot with a release store of `tail`, the consumer frees it with a release store of `head`.
//
// Doorbell protocol (no lost wake-ups, no syscall on the fast path): the owner reads `doorbell`, sets
// `sleeping`, re-checks its rings and FUTEX_WAITs on `doorbell`; a producer, after publishing, checks
// `sleeping` and only then clears it (so one producer rings per sleep), increments `doorbell` and FUTEX_WAKEs.
// Seq-cst fences on both sides guarantee that either the owner sees the message or the producer sees the flag; a
// producer that finds the flag already cleared published before the owner's next re-check, which sees its message.
//
// Non-goals: multiple producers per ring, variable-size messages, bulk data (writes go through
// process_vm_writev; only their notifications travel here).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "transport/transport.h"
#include "zerowire/status.h"

namespace zw::transport {

inline constexpr uint32_t kRingSlots = 256;                    // messages in flight per (peer, owner) pair
inline constexpr uint64_t kSegmentMagic = 0x7a772d73686d2d31;  // "zw-shm-1"
inline constexpr uint32_t kSegmentVersion = 1;

// One message in a ring; mirrors transport::Message in exactly 256 bytes.
struct ShmSlot {
  uint32_t size;                         // control payload bytes (<= Message::kMaxControl)
  uint8_t kind;                          // MessageKind
  uint8_t reserved[3];                   // zero
  uint64_t notify;                       // notify value of a write
  std::byte data[Message::kMaxControl];  // control payload
};
static_assert(sizeof(ShmSlot) == 256, "a slot is four cache lines");

// Ring messages of these kinds carry (part of) a small write: the destination address (u64), then the bytes. The
// last part of a write is kInlineWriteKind and carries its notify.
inline constexpr MessageKind kInlineWriteKind = static_cast<MessageKind>(2);
inline constexpr MessageKind kInlinePartKind = static_cast<MessageKind>(3);
inline constexpr size_t kInlineWriteMax = Message::kMaxControl - sizeof(uint64_t);

// What a popped slot asks of its consumer, decided from the kind and the size the producer wrote (try_pop's
// *raw_size). Pure: ShmEndpoint::pop_ring acts on it, tests/fuzz checks it.
struct RingMessage {
  enum Type : uint8_t {
    kMessage,      // a Notify or Control message, delivered as it is
    kInlineWrite,  // copy `bytes` to `address`, then deliver a Notify with the slot's notify value
    kInlinePart,   // copy `bytes` to `address`; more parts of the same write follow
    kMalformed,    // an unknown kind or an impossible size: the peer's memory or version is wrong
  };
  Type type = kMalformed;
  uint64_t address = 0;              // inline parts: destination in a region this rank registered
  const std::byte* bytes = nullptr;  // inline parts: inside the popped Message's data
  size_t size = 0;                   // inline parts: bytes to copy (at most kInlineWriteMax)
};
RingMessage classify_ring_message(const Message& message, uint32_t raw_size);

// Indices of one ring, each on its own cache line so that producer and consumer do not false-share.
struct RingControl {
  alignas(64) uint64_t tail;         // messages published; written by the producer only
  alignas(64) uint64_t head;         // messages consumed; written by the consumer (the owner) only
  alignas(64) int32_t attached_pid;  // the producer's pid once it has mapped this segment; 0 before
};
static_assert(sizeof(RingControl) == 192);

// First bytes of a segment: written once by the owner before `magic`; afterwards only the atomics change.
struct SegmentHeader {
  uint64_t magic;                       // kSegmentMagic, stored last (release) once the segment is initialized
  uint32_t version;                     // kSegmentVersion
  uint32_t world_size;                  // ranks (and rings) in the segment
  int32_t owner_rank;                   // rank that created the segment and consumes its rings
  int32_t owner_pid;                    // its process id
  uint32_t ring_slots;                  // kRingSlots
  uint32_t slot_bytes;                  // sizeof(ShmSlot)
  alignas(64) uint32_t doorbell;        // futex word: incremented by producers that saw `sleeping`
  uint32_t sleeping;                    // 1 while the owner is (about to be) in FUTEX_WAIT
  alignas(64) uint32_t attached_count;  // peers that have mapped this segment
};

// Producer end of one ring. Caches the consumer's head so that a non-full ring costs no shared read.
class ShmRingProducer {
 public:
  ShmRingProducer() = default;
  ShmRingProducer(RingControl* control, ShmSlot* slots);
  bool valid() const { return control_ != nullptr; }
  // Copies the message into the next slot and publishes it; false when the ring is full.
  bool try_push(MessageKind kind, uint64_t notify, std::span<const std::byte> payload);

 private:
  RingControl* control_ = nullptr;
  ShmSlot* slots_ = nullptr;
  uint64_t tail_ = 0;        // our copy of control_->tail
  uint64_t head_cache_ = 0;  // last head we read
};

// Consumer end of one ring (owned by the endpoint of the producing peer).
class ShmRingConsumer {
 public:
  ShmRingConsumer() = default;
  ShmRingConsumer(RingControl* control, ShmSlot* slots);
  // Copies the next message out and frees its slot; false when the ring is empty. *raw_size receives the
  // slot's size field as written by the producer (the copy is clamped to Message::kMaxControl).
  bool try_pop(Message* out, uint32_t* raw_size);

 private:
  RingControl* control_ = nullptr;
  ShmSlot* slots_ = nullptr;
  uint64_t head_ = 0;        // our copy of control_->head
  uint64_t tail_cache_ = 0;  // last tail we read
};

// A mapped segment: the owner's (created) or a peer's (opened). Thread-safe except where noted; the mapping
// lives as long as the object, and the owner's object unlinks the name on destruction if still linked.
class ShmSegment {
 public:
  // Creates, sizes, pre-faults and initializes the owner's segment (reclaiming a stale one whose owner died).
  static Result<std::shared_ptr<ShmSegment>> create(const std::string& name, int owner_rank, int world_size);
  // Maps a peer's segment and validates its header; kNotFound while it does not exist or is being set up.
  static Result<std::shared_ptr<ShmSegment>> open(const std::string& name, int owner_rank, int32_t owner_pid,
                                                  int world_size);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const std::string& name() const { return name_; }
  int world_size() const { return world_size_; }
  RingControl* control(int producer_rank) const;
  ShmSlot* slots(int producer_rank) const;

  // Producer side (on a peer's segment): records that `producer_rank` has mapped it; idempotent.
  void mark_attached(int producer_rank, int32_t pid);
  // Wakes the owner if it sleeps in wait(); call after publishing a message.
  void ring_doorbell();

  // Owner side.
  bool attached(int producer_rank) const;
  // Unlinks the name once every other rank has attached (the mappings stay valid).
  void unlink_if_all_attached();
  void unlink();
  bool linked() const { return linked_.load(std::memory_order_acquire); }
  // Whether a message waits in any inbound ring or in an endpoint's local backlog.
  bool any_pending() const;
  // Polls for `spin_us` then sleeps on the doorbell; returns when a message may be pending or after `timeout`.
  // Polls hot for 5 µs (a peer on another core answers within that), then yields the CPU (sched_yield)
  // between polls for the rest of `spin_us`, then sleeps on the futex. Yielding matters when ranks (or other
  // work) outnumber cores: the peer whose message ends this wait must get to run, and a pausing spinner holds
  // its core for the whole spin (measured: 4 KiB all-gather 1–2 ms with a 1 ms pause-spin on a loaded 2-core
  // VM, ~20 µs yielding). When the world's ranks outnumber this process's CPUs the hot poll is skipped: the
  // rank that would end the wait may be the one waiting for this CPU (measured: 4 ranks on 2 cores, 4 KiB
  // all-gather). Returns when it last looked and found nothing (zw::now_ns; read after a sleep on the futex), which
  // precedes what ended the wait by at most one poll.
  uint64_t wait(std::chrono::microseconds timeout, int64_t spin_us);
  // Messages endpoints drained from rings into local backlogs (process-local, not in shared memory).
  std::atomic<int64_t>& backlog() { return backlog_; }

  static size_t segment_bytes(int world_size);

 private:
  ShmSegment(std::string name, void* base, size_t bytes, int world_size, bool owner);
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }

  std::string name_;                 // POSIX shm name
  void* base_;                       // start of the mapping
  size_t bytes_;                     // length of the mapping
  int world_size_;                   // rings in the segment
  bool owner_;                       // created (and so unlinks) the segment
  int32_t creator_pid_;              // process that created it: a fork()ed child never unlinks its parent's segment
  bool oversubscribed_;              // world_size exceeds the CPUs this process may run on (wait() never hot-polls)
  std::atomic<bool> linked_;         // the name still exists in /dev/shm (owner only)
  std::atomic<int64_t> backlog_{0};  // see backlog()
};

}  // namespace zw::transport
