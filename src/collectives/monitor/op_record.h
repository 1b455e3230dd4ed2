// collectives/monitor/op_record.h — the fixed-size record every operation leaves, and the header of the ring that
// holds a communicator's last records. The layout is a file format too: with ZW_FLIGHT_DIR set the ring lives in
// a memory-mapped file that outlives a killed process, and tools/zw_flight reads it (keep the two in step; bump
// kRingVersion on any change).
//
// Every field is a relaxed atomic word so that a reader may copy a slot while its single writer updates it; the
// slot's `version` is a seqlock (odd while a write is in progress), which tells a reader whether its copy is whole.
// Non-goals: variable-size data (descriptions are rebuilt from the numeric fields), wall-clock ordering across
// hosts (times are this host's CLOCK_MONOTONIC; the header holds one realtime/monotonic pair to convert them).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace zw::internal::monitor {

inline constexpr char kRingMagic[8] = {'Z', 'W', 'F', 'L', 'I', 'G', 'H', 'T'};
// 2: last_enqueued moved off the writer's lines. 3: one 64-byte line per record (bytes derived from count, dtype, op
// and world size; root in the coll_index word; flags in the state byte), and the writer no longer stores into the
// header per operation (readers find the newest record by the slots' versions: RecordRing::begun()).
inline constexpr uint32_t kRingVersion = 3;

// Where an operation is in its life.
enum class OpState : uint8_t { kEmpty = 0, kRunning = 1, kDone = 2, kFailed = 3 };

// The numeric fields of one record, as a reader sees them after a consistent copy.
struct OpFields {
  uint64_t seq = 0;         // queue sequence number on this communicator (every operation, from 1)
  uint64_t coll_index = 0;  // collectives run before this one (the same on every rank); p2p batches: not counted
  uint64_t bytes = 0;       // bytes the operation moves in nccl-tests' terms (busbw = bytes/time x factor)
  uint64_t count = 0;       // element count as passed by the caller
  uint64_t enqueue_ns = 0;  // CLOCK_MONOTONIC when the caller issued it
  uint64_t start_ns = 0;    // when it started running
  uint64_t end_ns = 0;      // when it finished (0 while running)
  uint8_t kind = 0;         // OpKind
  uint8_t algo = 0;         // Algo
  uint8_t dtype = 0;        // DataType
  uint8_t redop = 0;        // ReduceOp
  uint8_t state = 0;        // OpState
  uint16_t status = 0;      // zw::Code of the result (0: ok)
  uint8_t path = 0;         // PathKind
  uint32_t root = 0;        // root rank of broadcast/reduce
  uint8_t flags = 0;        // kRecordUntimed
};

// OpFields::flags: a device operation whose run was not timed (the device path times a sample of its small operations,
// gpu/gpu_monitor.h): it is done by end_ns, which is when its completion was seen, and start_ns equals end_ns.
inline constexpr uint8_t kRecordUntimed = 1;

// Which way the bytes went: the host transport, or a device-memory engine.
enum class PathKind : uint8_t { kHost = 0, kDevice = 1 };

// One slot: 8 words (64 bytes, one cache line: an operation's hooks store into that line and no other). Word 0 is the
// seqlock; the rest pack OpFields. Round r of a slot (the records r·capacity + slot) writes version 4r+1 then 4r+2 at
// its beginning and 4r+3 then 4r+4 at its end, so a version tells which record a slot holds and how far it got.
struct RecordSlot {
  std::atomic<uint64_t> version;  // odd: being written
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> coll_root;  // coll_index (low kCollIndexBits) | root << kCollIndexBits
  std::atomic<uint64_t> count;
  std::atomic<uint64_t> enqueue_ns;
  std::atomic<uint64_t> start_ns;
  std::atomic<uint64_t> end_ns;
  // kind | algo<<8 | dtype<<16 | redop<<24 | (state | flags<<4)<<32 | status<<40 | path<<56
  std::atomic<uint64_t> packed;
};
static_assert(sizeof(RecordSlot) == 64, "RecordSlot is a file format: 8 little-endian 64-bit words, one cache line");
// coll_index below 2^44 (5.6 years of one collective a microsecond); root below 2^20 (CommImpl::kMaxWorldSize).
inline constexpr unsigned kCollIndexBits = 44;

// The ring's header (512 bytes), followed by `capacity` slots. Text fields are NUL-terminated.
struct RingHeader {
  char magic[8];                        // kRingMagic
  uint32_t version;                     // kRingVersion
  uint32_t header_bytes;                // sizeof(RingHeader)
  uint32_t slot_bytes;                  // sizeof(RecordSlot)
  uint32_t capacity;                    // slots (a power of two)
  int32_t rank;                         // this rank in the communicator
  int32_t size;                         // world size
  int32_t pid;                          // this process
  uint32_t generation;                  // communicators of one name are numbered in creation order
  uint64_t realtime_ns;                 // CLOCK_REALTIME at creation ...
  uint64_t monotonic_ns;                // ... and CLOCK_MONOTONIC at the same moment
  uint64_t unused_written;              // versions 1-2: records begun so far (0 since 3: see RecordRing::begun)
  uint64_t unused;                      // version 1's last_enqueued (0)
  std::atomic<uint64_t> failed;         // 1 once the communicator failed (reason below)
  uint64_t unused_heartbeat;            // versions 1-2: when the last record was begun (0 since 3: in the record)
  char host[64];                        // this host
  char comm[64];                        // communicator name
  char transport[16];                   // transport name
  char reason[256];                     // the first failure, as its error message (truncated)
  // Sequence number of the last operation issued, stored by the issuing thread (often not the writer of the records),
  // on a line of its own (version 2; at offset 64 in version 1).
  std::atomic<uint64_t> last_enqueued;
  char pad[16];
};
static_assert(sizeof(RingHeader) == 512, "RingHeader is a file format of 512 bytes");
static_assert(offsetof(RingHeader, last_enqueued) == 488 && offsetof(RingHeader, failed) == 72,
              "the header's layout is version 2's");

}  // namespace zw::internal::monitor
