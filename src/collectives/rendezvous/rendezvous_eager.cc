// Eager transfers of the rendezvous (see rendezvous.h): small messages go into a slot of the receiver's inbox
// without waiting for a clear-to-send, and the receiver returns the slot with a CREDIT message.
//
// Slots are tracked per (sender, receiver) pair as a bitmask on the sender; the receiver may free them in any
// order (it copies data out when both the data and the matching receive are there). A sender without a free
// slot waits for a credit like any other wait: it pumps messages, so it never blocks a peer that needs it.
//
// Credits are batched: an emptied slot is owed until the receiver next sends that sender an EAGER or
// clear-to-send message (which carries the owed slots at no cost), or until half of the sender's slots are
// owed (a CREDIT message with all of them), or until the receiver is about to block in a wait (wait_for). So a
// rank that waits owes nothing, as when every slot was returned at once, and a sender never waits for slots
// that a blocked receiver holds back.
#include <bit>
#include <cstdio>
#include <cstring>
#include <string>

#include "collectives/rendezvous/rendezvous.h"
#include "collectives/rendezvous/rendezvous_wire.h"

namespace zw::internal {
namespace {

std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

void Rendezvous::enable_eager(const EagerConfig& config, const RegBuf& inbox,
                              std::vector<std::vector<std::byte>> peer_inbox_keys) {
  eager_ = config;
  inbox_ = inbox;
  peer_inbox_keys_ = std::move(peer_inbox_keys);
  const uint64_t all = config.slots >= 64 ? ~uint64_t{0} : (uint64_t{1} << config.slots) - 1;
  for (size_t p = 0; p < state_.size(); ++p) state_[p].free_slots = static_cast<int>(p) == rank_ ? 0 : all;
}

Status Rendezvous::post_eager(int peer, std::byte* dst, size_t bytes, uint64_t tag) {
  auto& arrived = state_[peer].eager_arrived;
  for (auto it = arrived.begin(); it != arrived.end(); ++it) {
    if (it->seq != seq_ || it->tag != tag) continue;
    EagerArrived a = *it;
    arrived.erase(it);
    return consume_eager(peer, a, dst, bytes);
  }
  state_[peer].eager_posted.push_back(EagerPosted{seq_, tag, dst, bytes});
  return Status();
}

Status Rendezvous::send_eager(int peer, const RegBuf& src, size_t offset, size_t bytes, uint64_t tag) {
  PeerState& st = state_[peer];
  ZW_TRY(wait_for(peer, "a free eager slot", tag, [&] { return st.free_slots != 0; }));
  const uint32_t slot = static_cast<uint32_t>(std::countr_zero(st.free_slots));
  st.free_slots &= ~(uint64_t{1} << slot);
  const size_t remote = (static_cast<size_t>(rank_) * eager_.slots + slot) * eager_.bytes;
  EagerWire w{};
  w.type = kCtrlEager;
  w.slot = slot;
  w.op = to_wire(desc_, seq_);
  w.tag = tag;
  w.bytes = bytes;
  w.credits = st.owed_credits;  // owed slots ride along (see the top of this file)
  st.owed_credits = 0;
  // The data and its EAGER announcement: one frame on tcp, a write then a send elsewhere.
  Status s =
      endpoints_[peer]->write_announced(*src.mr, offset, peer_inbox_keys_[peer], remote, bytes, kEagerNotify,
                                        std::span<const std::byte>(reinterpret_cast<const std::byte*>(&w), sizeof w));
  // The inbox outlives every operation its owner takes part in, so a failed write means the owner is gone or
  // has torn down this communicator (or never joined this collective).
  if (!s.ok())
    return explain(Status(Code::kPeerFailed, describe(peer) + " no longer accepts data (it exited, destroyed the "
                                                              "communicator, or is not running this collective): " +
                                                 s.message()));
  return Status();
}

Status Rendezvous::on_eager(int peer, std::span<const std::byte> payload) {
  EagerWire w;
  if (payload.size() != sizeof w || eager_.bytes == 0)
    return Status(Code::kProtocolError, "unexpected eager message from " + describe(peer));
  std::memcpy(&w, payload.data(), sizeof w);
  if (w.slot >= static_cast<uint32_t>(eager_.slots) || w.bytes > eager_.bytes)
    return Status(Code::kProtocolError, "eager message from " + describe(peer) + " names slot " +
                                            std::to_string(w.slot) + " with " + std::to_string(w.bytes) + " bytes");
  if (!known_op(w.op)) return unknown_op(peer, "eager message", w.op);
  if (w.credits != 0) ZW_TRY(take_credits(peer, w.credits));
  EagerArrived a{w.op.seq, w.tag, w.bytes, from_wire(w.op), w.slot};
  if (a.seq == seq_) ZW_TRY(check_desc(peer, a.desc));
  note_seen(peer, a.seq, a.desc);
  auto& posted = state_[peer].eager_posted;
  for (auto it = posted.begin(); it != posted.end(); ++it) {
    if (it->seq != a.seq || it->tag != a.tag) continue;
    EagerPosted p = *it;
    posted.erase(it);
    return consume_eager(peer, a, p.dst, p.bytes);
  }
  state_[peer].eager_arrived.push_back(a);
  return Status();
}

Status Rendezvous::consume_eager(int peer, const EagerArrived& a, std::byte* dst, size_t bytes) {
  if (a.bytes != bytes)
    return Status(Code::kDesync, describe(peer) + " sent " + std::to_string(a.bytes) + " bytes of " +
                                     desc_.describe() + " where " + describe(rank_) + " expects " +
                                     std::to_string(bytes));
  const size_t offset = (static_cast<size_t>(peer) * eager_.slots + a.slot) * eager_.bytes;
  std::memcpy(dst, inbox_.data() + offset, bytes);
  // The message's own operation number: inside a send_recv batch another transfer's number may be current here
  // (each pair of ranks numbers its transfers), and a notify filed under it would never be found by wait_recv.
  state_[peer].notifies.push_back(notify_value(a.seq, a.tag));
  state_[peer].owed_credits |= uint64_t{1} << a.slot;
  send_credits_if_due(peer);
  return Status();
}

void Rendezvous::send_credits_if_due(int peer, bool now) {
  PeerState& st = state_[peer];
  if (st.owed_credits == 0 || (!now && std::popcount(st.owed_credits) * 2 < eager_.slots)) return;
  CreditWire c{};
  c.type = kCtrlCredit;
  c.slots = st.owed_credits;
  st.owed_credits = 0;
  // Best effort: a sender that already finished and left needs no credit; a sender that died is noticed by
  // the endpoint's sticky error wherever this rank next waits for it.
  (void)endpoints_[peer]->send(std::span<const std::byte>(reinterpret_cast<const std::byte*>(&c), sizeof c));
}

Status Rendezvous::on_credit(int peer, std::span<const std::byte> payload) {
  CreditWire c;
  if (payload.size() != sizeof c) return Status(Code::kProtocolError, "malformed credit from " + describe(peer));
  std::memcpy(&c, payload.data(), sizeof c);
  return take_credits(peer, c.slots);
}

Status Rendezvous::take_credits(int peer, uint64_t slots) {
  const uint64_t all = eager_.slots >= 64 ? ~uint64_t{0} : (uint64_t{1} << eager_.slots) - 1;
  if (eager_.bytes == 0 || (slots & ~all) != 0 || (slots & state_[peer].free_slots) != 0)
    return Status(Code::kProtocolError, "credit for eager slots 0x" + hex(slots) + " from " + describe(peer) +
                                            ", which this rank did not use (mismatched zerowire versions?)");
  state_[peer].free_slots |= slots;
  return Status();
}

}  // namespace zw::internal
