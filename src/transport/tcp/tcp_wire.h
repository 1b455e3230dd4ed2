// The tcp transport's wire format: the connection handshake (Hello) and the frame header that precedes every
// payload on an established connection, plus the intrusive queues of send requests the endpoint posts.
//
// A connection starts with the connecting (higher) rank sending a Hello; the accepting (lower) rank answers
// with its own Hello once it has an endpoint for that peer. After that each side sends frames: a FrameHeader
// followed by `length` payload bytes (a control message, or one stripe of a write); a kWriteAnnounced frame
// (a single-stripe write and the control message announcing it, Endpoint::write_announced) is followed by
// `length` write bytes and then `announce_length` control bytes, and delivers Notify, then Control.
// Non-goals: mixed-endian clusters (both sides use the native little-endian layout), version negotiation
// beyond rejecting a different kWireVersion.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "transport/transport.h"

namespace zw::transport::tcp {

static_assert(std::endian::native == std::endian::little, "the tcp wire format assumes a little-endian host");

inline constexpr uint32_t kHelloMagic = 0x4354575a;  // "ZWTC"
inline constexpr uint16_t kWireVersion = 2;          // 2: kWriteAnnounced frames
inline constexpr int kMaxConnsPerPeer = 64;  // ZW_TCP_CONNS_PER_PEER is clamped to 1..kMaxConnsPerPeer

// First bytes on every connection, in both directions (the answer echoes the index and count).
struct Hello {
  uint32_t magic;       // kHelloMagic
  uint16_t version;     // kWireVersion
  uint16_t conn_index;  // which of the pair's connections this is, 0 .. conn_count-1
  uint16_t conn_count;  // connections per peer the sender uses (must match)
  uint16_t reserved;    // zero
  int32_t rank;         // sender's rank
  uint64_t job_hash;    // job_hash(TransportOptions::job_id) of the sender
};
static_assert(sizeof(Hello) == 24);

// kGoodbye: the sender closes the pair on purpose (endpoint or transport destroyed); no payload.
enum class FrameType : uint8_t { kControl = 1, kWrite = 2, kGoodbye = 3, kWriteAnnounced = 4 };

struct FrameHeader {
  uint8_t type;              // FrameType
  uint8_t reserved0;         // zero
  uint16_t stripe_index;     // this stripe of the write, 0 .. stripe_count-1
  uint16_t stripe_count;     // stripes the write was split into (1 for control and small writes)
  uint16_t announce_length;  // control bytes after the write payload (kWriteAnnounced), else zero
  uint32_t region_id;        // target region on the receiver (writes)
  uint32_t reserved2;        // zero
  uint64_t length;           // payload bytes that follow the header (write bytes only, for kWriteAnnounced)
  uint64_t remote_offset;    // where in the region this stripe lands (already includes the stripe's offset)
  uint64_t notify;           // notify value delivered once every stripe arrived (writes)
  uint64_t write_seq;        // per-endpoint sequence number of the write (joins the stripes)
};
static_assert(sizeof(FrameHeader) == 48);

// Whether a write frame's stripe numbers fit a pair of `nconns` connections (PeerState::write_target's check).
inline bool stripe_valid(const FrameHeader& h, int nconns) {
  return h.stripe_count != 0 && h.stripe_count <= nconns && h.stripe_index < h.stripe_count;
}
// Whether [offset, offset + length) lies inside a region of `bytes` bytes, without overflow.
inline bool range_inside(uint64_t offset, uint64_t length, uint64_t bytes) {
  return offset <= bytes && length <= bytes - offset;
}

// Why `hello` cannot come from a peer of the job hashed `job_hash` that uses `conns_per_peer` connections, or ""
// when it can (the rank is checked by the caller). Defined in tcp_connection.cc.
std::string hello_problem(const Hello& hello, uint64_t job_hash, int conns_per_peer);

// FNV-1a of the job id: a connection from another job (stale port reuse, wrong store) is rejected.
inline uint64_t job_hash(std::string_view job_id) {
  uint64_t h = 1469598103934665603ull;
  for (char c : job_id) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// One posted write; completes (in posting order) once every stripe was handed to the kernel.
struct WriteRecord {
  uint32_t stripes_left = 0;    // stripes not yet fully sent (progress thread only)
  bool done = false;            // all stripes sent (progress thread only)
  WriteRecord* next = nullptr;  // intrusive queue link
};

// One frame to send on one connection: header, then `header.length` payload bytes from `payload`, then
// `header.announce_length` bytes from `control` (kWriteAnnounced).
struct SendReq {
  FrameHeader header{};                                 // sent first
  const std::byte* payload = nullptr;                   // caller's buffer, or `control` below
  size_t sent = 0;                                      // bytes of header + payload already written
  WriteRecord* record = nullptr;                        // the write this stripe belongs to; null for control
  SendReq* next = nullptr;                              // intrusive queue link
  std::array<std::byte, Message::kMaxControl> control;  // copy of a control payload, or of the announcement
  size_t total() const { return sizeof(FrameHeader) + header.length + header.announce_length; }
};

// Intrusive FIFO of nodes with a `next` pointer; owns nothing.
template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == nullptr; }
  T* front() const { return head_; }
  void push(T* node) {
    node->next = nullptr;
    if (tail_)
      tail_->next = node;
    else
      head_ = node;
    tail_ = node;
  }
  T* pop() {
    T* node = head_;
    if (node) {
      head_ = node->next;
      if (!head_) tail_ = nullptr;
      node->next = nullptr;
    }
    return node;
  }
  // Moves every node of `other` to the back of this queue.
  void splice(Fifo& other) {
    if (other.empty()) return;
    if (tail_)
      tail_->next = other.head_;
    else
      head_ = other.head_;
    tail_ = other.tail_;
    other.head_ = other.tail_ = nullptr;
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
};

}  // namespace zw::transport::tcp
