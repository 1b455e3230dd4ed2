// tests/fuzz/fuzz_verbs_wire.cc — what a peer hands the verbs transport (src/transport/verbs) before and during a
// connection: its address text from the store (VerbsAddress::parse), the rdma_cm private data of its connection
// request or reply (decode_cm_private), the RoCE GID text helpers (ip_of_gid) and reject reasons, and the slots it
// RDMA-writes into our eager ring (verbs_ring_wire.h: peek_ring_slot, decode_ring_body, which VerbsConnection's
// take_slot/deliver_slot run).
//
// The first byte picks the part (mod 5): 0 — the rest is an address; 1 — CM private data; 2 — a GID and a reject
// code; 3 — raw ring slots (kRingSlotBytes each, as the peer wrote them); 4 — ring slots that the harness seals
// (sequence number and check word made right, so that the fuzzer reaches the body decoder). Checked: a parsed
// address prints and parses back to the same fields; decoded private data encodes and decodes back to the same
// fields; a ready slot's body (control payload or inline bytes) lies inside the slot and is at most
// Message::kMaxControl bytes (copied to buffers of exactly that size, so ASan sees any overrun); failures carry
// the documented codes.
// Non-goals: queue pairs, memory registration, the inline target's validity (the registration cache checks it).
#include <array>
#include <cstring>

#include "fuzz_check.h"
#include "transport/verbs/verbs_address.h"
#include "transport/verbs/verbs_cm_wire.h"
#include "transport/verbs/verbs_ring_wire.h"

using namespace zw;
using namespace zw::transport;
using namespace zw::transport::verbs;

namespace {

bool same(const VerbsAddress& a, const VerbsAddress& b) {
  return a.rank == b.rank && a.host == b.host && a.device == b.device && a.lid == b.lid && a.gid == b.gid &&
         a.ethernet == b.ethernet && a.mtu == b.mtu && a.psn == b.psn && a.credit_addr == b.credit_addr &&
         a.credit_rkey == b.credit_rkey && a.qps == b.qps && a.qpn == b.qpn && a.live == b.live && a.cm == b.cm;
}

bool same(const CmPrivate& a, const CmPrivate& b) {
  return a.reply == b.reply && a.qp_index == b.qp_index && a.qps == b.qps && a.from_rank == b.from_rank &&
         a.to_rank == b.to_rank && a.job == b.job && a.credit_addr == b.credit_addr && a.credit_rkey == b.credit_rkey;
}

void fuzz_address(std::string_view text) {
  Result<VerbsAddress> a = VerbsAddress::parse(std::string(text));
  if (!a.ok()) {
    FUZZ_CHECK(a.status().code() == Code::kInvalidArgument, a.status().to_string());
    return;
  }
  FUZZ_CHECK(a->qpn.size() % static_cast<size_t>(a->qps) == 0 && a->qpn.size() / a->qps > static_cast<size_t>(a->rank),
             "qpn list does not cover the rank");
  const std::string printed = a->to_string();
  Result<VerbsAddress> b = VerbsAddress::parse(printed);
  FUZZ_CHECK(b.ok(), b.status().to_string());
  FUZZ_CHECK(same(*a, *b), printed);
}

void fuzz_cm_private(const uint8_t* data, size_t size) {
  Result<CmPrivate> p = decode_cm_private(size == 0 ? nullptr : data, size);
  if (!p.ok()) {
    FUZZ_CHECK(p.status().code() == Code::kProtocolError, p.status().to_string());
    return;
  }
  const auto bytes = encode_cm_private(*p);
  Result<CmPrivate> q = decode_cm_private(bytes.data(), bytes.size());
  FUZZ_CHECK(q.ok() && same(*p, *q), "private data does not survive encode/decode");
}

void fuzz_gid(const uint8_t* data, size_t size) {
  std::array<uint8_t, 16> gid{};
  std::memcpy(gid.data(), data, std::min(size, gid.size()));
  const std::string ip = ip_of_gid(gid);
  FUZZ_CHECK(ip.size() < 64, ip);
  int reason = 0;
  if (size > 16) std::memcpy(&reason, data + 16, std::min<size_t>(size - 16, sizeof reason));
  FUZZ_CHECK(!cm_reject_reason(reason).empty(), "empty reject reason");
}

// Slots in ring order; `seal` writes each slot's sequence number and check word (for the size its header gives).
void fuzz_ring(const uint8_t* data, size_t size, bool seal) {
  constexpr size_t kSlots = 8;
  static auto* ring = new std::array<std::byte, kSlots * kRingSlotBytes>;
  ring->fill(std::byte{0});
  std::memcpy(ring->data(), data, std::min(size, ring->size()));
  bool target_known = false;
  for (uint64_t seq = 1; seq <= kSlots; ++seq) {
    std::byte* slot = ring->data() + (seq - 1) * kRingSlotBytes;
    if (seal) {
      RingHeader h;
      std::memcpy(&h, slot, kHeaderBytes);
      h.seq32 = static_cast<uint32_t>(seq);
      std::memcpy(slot, &h, kHeaderBytes);
      if (h.size <= Message::kMaxControl) {
        const size_t used = kHeaderBytes + ring_padded(h.size);
        const uint64_t check = ring_check(slot, used, seq);
        std::memcpy(slot + used, &check, kCheckBytes);
      }
    }
    RingHeader header;
    size_t used = 0;
    const RingSlot state = peek_ring_slot(slot, seq, &header, &used);
    if (state == RingSlot::kOversize) {
      FUZZ_CHECK(header.size > Message::kMaxControl, std::to_string(header.size));
      return;  // the connection fails here
    }
    if (state == RingSlot::kNotReady) return;
    FUZZ_CHECK(used + kCheckBytes <= kRingSlotBytes, std::to_string(used));
    RingBody body;
    Status st = decode_ring_body(header, slot + kHeaderBytes, target_known, &body);
    if (!st.ok()) {
      FUZZ_CHECK(st.code() == Code::kProtocolError, st.to_string());
      return;  // the connection fails here
    }
    if (body.data != nullptr) {
      FUZZ_CHECK(body.size <= Message::kMaxControl, std::to_string(body.size));
      FUZZ_CHECK(body.data >= slot + kHeaderBytes && body.data + body.size <= slot + kHeaderBytes + header.size,
                 "body outside the slot");
      std::array<std::byte, Message::kMaxControl> copy;
      std::memcpy(copy.data(), body.data, body.size);
    }
    target_known = target_known || body.has_target;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 5) {
    case 0:
      fuzz_address(fuzz::as_text(data + 1, size - 1));
      break;
    case 1:
      fuzz_cm_private(data + 1, size - 1);
      break;
    case 2:
      fuzz_gid(data + 1, size - 1);
      break;
    default:
      fuzz_ring(data + 1, size - 1, data[0] % 5 == 4);
      break;
  }
  return 0;
}
