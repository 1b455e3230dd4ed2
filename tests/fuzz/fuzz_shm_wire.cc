// tests/fuzz/fuzz_shm_wire.cc — what a same-host peer hands the shm transport (src/transport/shm): its address
// text from the store (ShmAddress::parse) and the slots it writes into our inbound ring (ShmRingConsumer::try_pop
// and classify_ring_message, which ShmEndpoint::pop_ring acts on).
//
// The first byte picks the part: even — the rest is an address; odd — the rest fills ring slots (256 bytes each,
// the last one zero-padded), published by a tail store as a producer would. Checked: a parsed address prints and
// parses back to the same fields; every slot pops once, a delivered message is at most Message::kMaxControl bytes,
// an inline write's bytes lie inside the popped message and are at most kInlineWriteMax (copied to a buffer of that
// size, so ASan sees any overrun); unknown kinds and impossible sizes are reported malformed.
// Non-goals: the inline write's destination (a region this rank registered; a peer on this host could write there
// through process_vm_writev anyway), futex wake-ups, segment headers (ShmSegment::open maps real files).
#include <array>
#include <cstring>
#include <memory>

#include "fuzz_check.h"
#include "transport/shm/shm_address.h"
#include "transport/shm/shm_queue.h"

using namespace zw;
using namespace zw::transport;

namespace {

void fuzz_address(std::string_view text) {
  Result<ShmAddress> a = ShmAddress::parse(std::string(text));
  if (!a.ok()) {
    FUZZ_CHECK(a.status().code() == Code::kInvalidArgument, a.status().to_string());
    return;
  }
  const std::string printed = a->to_string();
  Result<ShmAddress> b = ShmAddress::parse(printed);
  FUZZ_CHECK(b.ok(), b.status().to_string());
  FUZZ_CHECK(b->rank == a->rank && b->pid == a->pid && b->start_time == a->start_time && b->segment == a->segment &&
                 b->host.hostname == a->host.hostname && b->host.boot_id == a->host.boot_id &&
                 b->host.pid_ns == a->host.pid_ns,
             printed);
}

struct Ring {
  RingControl control{};
  std::array<ShmSlot, kRingSlots> slots{};
};

void fuzz_ring(const uint8_t* data, size_t size) {
  static auto* ring = new Ring;  // 64 KiB, reused: cleared below
  std::memset(static_cast<void*>(ring), 0, sizeof *ring);
  const size_t n = std::min<size_t>((size + sizeof(ShmSlot) - 1) / sizeof(ShmSlot), kRingSlots);
  std::memcpy(ring->slots.data(), data, std::min(size, n * sizeof(ShmSlot)));
  ring->control.tail = n;
  ShmRingConsumer consumer(&ring->control, ring->slots.data());
  Message m;
  uint32_t raw_size = 0;
  size_t popped = 0;
  std::array<std::byte, kInlineWriteMax> target;
  while (consumer.try_pop(&m, &raw_size)) {
    ++popped;
    FUZZ_CHECK(m.size <= Message::kMaxControl, std::to_string(m.size));
    const RingMessage r = classify_ring_message(m, raw_size);
    switch (r.type) {
      case RingMessage::kMessage:
        FUZZ_CHECK(raw_size == m.size, "a delivered message was clamped");
        break;
      case RingMessage::kInlineWrite:
      case RingMessage::kInlinePart:
        FUZZ_CHECK(r.size <= kInlineWriteMax, std::to_string(r.size));
        FUZZ_CHECK(r.bytes >= m.data.data() && r.bytes + r.size <= m.data.data() + m.data.size(), "outside message");
        std::memcpy(target.data(), r.bytes, r.size);
        break;
      case RingMessage::kMalformed:
        FUZZ_CHECK(raw_size > Message::kMaxControl || (m.kind != MessageKind::kNotify && m.kind != MessageKind::kControl),
                   "a well-formed message was called malformed");
        break;
    }
  }
  FUZZ_CHECK(popped == n, "popped " + std::to_string(popped) + " of " + std::to_string(n));
  FUZZ_CHECK(ring->control.head == n, "head not advanced");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0)
    fuzz_address(fuzz::as_text(data + 1, size - 1));
  else
    fuzz_ring(data + 1, size - 1);
  return 0;
}
