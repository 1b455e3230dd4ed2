// The format of one slot of a verbs connection's eager ring (the wire protocol is described in
// verbs_connection.h): the 16-byte header {type, flags, size, seq32, notify}, `size` body bytes padded to 8, and the
// check word — how the sender fills a slot (encode_ring_slot), how the receiver tells that a slot has landed whole
// (peek_ring_slot) and what its body says (decode_ring_body). Header-only and free of ibverbs calls, so that
// VerbsConnection's hot path inlines it and tests/fuzz runs it on arbitrary bytes.
// Non-goals: flow control, immediates, validating inline-write targets (the registration cache does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "transport/transport.h"
#include "transport/verbs/verbs_memory_region.h"
#include "zerowire/status.h"

namespace zw::transport::verbs {

inline constexpr size_t kHeaderBytes = 16;            // RingHeader
inline constexpr size_t kCheckBytes = 8;              // the check word after the padded body
inline constexpr size_t kRingSlotBytes = kHeaderBytes + Message::kMaxControl + kCheckBytes + 8;  // 272, 16-aligned
inline constexpr size_t kInlineTargetBytes = 16;  // {address, rkey, reserved} after the header of a kInline
inline constexpr size_t kMaxInlineWrite = Message::kMaxControl - kInlineTargetBytes;  // 224 bytes
static_assert(kRingSlotBytes % 16 == 0 && kRingSlotBytes >= kHeaderBytes + Message::kMaxControl + kCheckBytes);

struct RingHeader {
  uint8_t type;    // RingType
  uint8_t flags;   // kRingAfterData, kRingImm, kRingSameTarget
  uint16_t size;   // body bytes (before the padding to 8)
  uint32_t seq32;  // the message's sequence number (from 1), low 32 bits
  uint64_t notify; // notify value (kNotify, kPart, kInline)
};
static_assert(sizeof(RingHeader) == kHeaderBytes);
enum RingType : uint8_t { kRingHello = 1, kRingNotify = 2, kRingControl = 3, kRingPart = 4, kRingInline = 5 };
inline constexpr uint8_t kRingAfterData = 1;   // deliver only after the message's receive completion
inline constexpr uint8_t kRingImm = 2;         // sent with an immediate: it took one of the receiver's posted receives
inline constexpr uint8_t kRingSameTarget = 4;  // a kInline without {address, rkey}: the previous kInline's

// Body bytes of a ring message rounded up to the check word's alignment.
inline size_t ring_padded(size_t body) { return (body + 7) / 8 * 8; }
// The check word of ring message `seq`: a hash of seq and the `bytes` (a multiple of 8) of its header and padded
// body; never 0, the value of a zeroed (free) slot.
inline uint64_t ring_check(const std::byte* data, size_t bytes, uint64_t seq) {
  uint64_t h = (seq + 1) * 0x9e3779b97f4a7c15ull;
  for (size_t at = 0; at < bytes; at += 8) {
    uint64_t w;
    std::memcpy(&w, data + at, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  return h | 1;
}

inline uint64_t ring_load_acquire(const std::byte* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
}

// Fills `slot` (kRingSlotBytes) with `header` (its size must be prefix + payload bytes, at most
// Message::kMaxControl), the body (`prefix` then `payload`), zero padding and the check word of message `seq`.
// Returns the bytes to write to the peer: header, padded body and check word.
inline size_t encode_ring_slot(std::byte* slot, const RingHeader& header, uint64_t seq,
                               std::span<const std::byte> prefix, std::span<const std::byte> payload) {
  const size_t body = prefix.size() + payload.size();
  const size_t padded = ring_padded(body);
  std::memcpy(slot, &header, kHeaderBytes);
  // The padding is zero: the last word of the body is cleared before the bytes are copied over it.
  if (padded > body) std::memset(slot + kHeaderBytes + padded - 8, 0, 8);
  if (!prefix.empty()) copy_small(slot + kHeaderBytes, prefix.data(), prefix.size());
  if (!payload.empty()) copy_small(slot + kHeaderBytes + prefix.size(), payload.data(), payload.size());
  const uint64_t check = ring_check(slot, kHeaderBytes + padded, seq);
  std::memcpy(slot + kHeaderBytes + padded, &check, kCheckBytes);
  return kHeaderBytes + padded + kCheckBytes;
}

enum class RingSlot : uint8_t {
  kNotReady,  // not (all) landed yet: another sequence number, or the check word does not match (yet)
  kOversize,  // the header carries this sequence number but an impossible size: malformed, not torn
  kReady,     // *header and *used (header + padded body) are valid
};
// Whether `slot` holds message `seq` whole. Consumes nothing.
inline RingSlot peek_ring_slot(const std::byte* slot, uint64_t seq, RingHeader* header, size_t* used) {
  (void)ring_load_acquire(slot);  // orders the reads below after it (the NIC writes the slot)
  std::memcpy(header, slot, kHeaderBytes);
  if (header->seq32 != static_cast<uint32_t>(seq)) return RingSlot::kNotReady;
  if (header->size > Message::kMaxControl) return RingSlot::kOversize;  // a torn header has a smaller size
  *used = kHeaderBytes + ring_padded(header->size);
  const uint64_t check = ring_load_acquire(slot + *used);
  if (check != ring_check(slot, *used, seq)) return RingSlot::kNotReady;
  // The header copied above may predate the rest of the write: the sequence number can land before the fields after
  // it (Soft-RoCE delivered a notify of 0, the zeroed slot's, with the right seq32 and a matching check word). The
  // check word matched the bytes as they are now, which nothing changes until the slot is consumed: read them again.
  std::memcpy(header, slot, kHeaderBytes);
  return header->seq32 == static_cast<uint32_t>(seq) && kHeaderBytes + ring_padded(header->size) == *used
             ? RingSlot::kReady
             : RingSlot::kNotReady;
}

// What the body of a ready slot holds (decode_ring_body).
struct RingBody {
  bool has_target = false;         // a kInline naming its target (else a kInline writes to the previous target)
  uint64_t address = 0;            // with has_target: the target address
  uint32_t rkey = 0;               // with has_target: its rkey
  const std::byte* data = nullptr;  // kControl: the payload; kInline: the bytes to copy
  size_t size = 0;                 // their count
};
// Decodes the body of a ready slot whose header is `h` (size <= Message::kMaxControl, as peek_ring_slot checked);
// `target_known` says whether an earlier kInline named a target. kProtocolError saying why for an unknown type, an
// inline write too short for its target or one without any target.
inline Status decode_ring_body(const RingHeader& h, const std::byte* body, bool target_known, RingBody* out) {
  switch (h.type) {
    case kRingHello:
    case kRingNotify:
    case kRingPart:
      return Status();
    case kRingControl:
      out->data = body;
      out->size = h.size;
      return Status();
    case kRingInline:
      if (h.flags & kRingSameTarget) {
        if (!target_known) return Status(Code::kProtocolError, "inline write without a target");
        out->data = body;
        out->size = h.size;
        return Status();
      }
      if (h.size < kInlineTargetBytes)
        return Status(Code::kProtocolError, "inline write of " + std::to_string(h.size) + " bytes");
      out->has_target = true;
      std::memcpy(&out->address, body, 8);
      std::memcpy(&out->rkey, body + 8, 4);
      out->data = body + kInlineTargetBytes;
      out->size = h.size - kInlineTargetBytes;
      return Status();
    default:
      return Status(Code::kProtocolError, "unknown type " + std::to_string(h.type));
  }
}

}  // namespace zw::transport::verbs
