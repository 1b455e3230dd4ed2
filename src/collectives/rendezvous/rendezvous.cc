// Receiver-driven rendezvous: clear-to-send messages, one-sided writes with notify, failure detection.
#include "collectives/rendezvous/rendezvous.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "collectives/monitor/peer_links.h"
#include "collectives/refusal.h"
#include "collectives/rendezvous/rendezvous_wire.h"
#include "common/log.h"

namespace zw::internal {
namespace {

static_assert(kMaxKey == 184, "Rendezvous::Cts::key holds exactly what fits a clear-to-send");

constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
constexpr auto kMaxSleep = std::chrono::microseconds(20000);

std::string tag_string(uint64_t tag) {
  return "phase " + std::to_string(tag >> 38) + " step " + std::to_string((tag >> 20) & 0x3FFFF) + " chunk " +
         std::to_string(tag & 0xFFFFF);
}

}  // namespace

Rendezvous::Rendezvous(int rank, transport::Transport& transport,
                       std::vector<std::unique_ptr<transport::Endpoint>>& endpoints, const std::vector<PeerInfo>& peers)
    : rank_(rank), transport_(transport), endpoints_(endpoints), peers_(peers), state_(endpoints.size()) {}

std::string Rendezvous::describe(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(peers_.size())) return "rank " + std::to_string(rank);
  return "rank " + std::to_string(rank) + " (host " + peers_[rank].host + ", pid " + std::to_string(peers_[rank].pid) +
         ")";
}

Status Rendezvous::begin_op(uint64_t seq, const OpDesc& desc, Deadline deadline, double timeout_s) {
  seq_ = seq;
  desc_ = desc;
  deadline_ = deadline;
  timeout_s_ = timeout_s;
  for (size_t p = 0; p < state_.size(); ++p) {
    for (const Cts& cts : state_[p].cts)
      if (cts.seq == seq_) ZW_TRY(check_desc(static_cast<int>(p), cts.desc));
    for (const EagerArrived& e : state_[p].eager_arrived)
      if (e.seq == seq_) ZW_TRY(check_desc(static_cast<int>(p), e.desc));
  }
  ZW_TRY(check_refusals());
  return pump();
}

Status Rendezvous::end_op() {
  return wait_for(
      rank_, "local completion of writes", 0,
      [&] {
        for (const auto& ep : endpoints_)
          if (ep && ep->writes_completed() < ep->writes_posted()) return false;
        return true;
      },
      /*local=*/true);
}

Status Rendezvous::check_desc(int peer, const OpDesc& desc) const {
  // A send_recv batch shares no description with its peers (each rank's batch differs); its byte counts are
  // compared per transfer instead.
  if (desc == desc_ || is_p2p(desc.kind) || is_p2p(desc_.kind)) return Status();
  if (is_refusal(desc) || is_refusal(desc_)) return Status();  // a REFUSE message says it (refusal.h)
  // The two operations come last and without hosts: a reason forwarded to the other ranks keeps its tail.
  return Status(Code::kDesync, describe(peer) + " and " + describe(rank_) +
                                   " disagree (every rank must issue the "
                                   "same collectives in the same order): as operation #" +
                                   std::to_string(seq_) + " rank " + std::to_string(peer) + " called " +
                                   desc.describe() + ", rank " + std::to_string(rank_) + " " + desc_.describe());
}

Status Rendezvous::dispatch(int peer, const transport::Message& msg) {
  if (msg.kind == transport::MessageKind::kNotify) {
    if (!(msg.notify & kEagerNotify)) state_[peer].notifies.push_back(msg.notify);
    return Status();
  }
  auto payload = msg.payload();
  if (payload.empty()) return Status(Code::kProtocolError, "empty control message from " + describe(peer));
  switch (static_cast<uint8_t>(payload[0])) {
    case kCtrlAbort:
      return on_abort(peer, payload);
    case kCtrlEager:
      return on_eager(peer, payload);
    case kCtrlCredit:
      return on_credit(peer, payload);
    case kCtrlRefuse:
      return on_refusal(peer, payload);
    case kCtrlBlameQuery:
      on_blame_query(peer, payload);
      return Status();
    case kCtrlCts:
      break;
    default:
      return Status(Code::kProtocolError, "unknown control message from " + describe(peer));
  }
  CtsWire w;
  if (payload.size() < sizeof w) return Status(Code::kProtocolError, "malformed clear-to-send from " + describe(peer));
  std::memcpy(&w, payload.data(), sizeof w);
  if (payload.size() != sizeof w + w.key_len || w.key_len > kMaxKey)
    return Status(Code::kProtocolError, "malformed clear-to-send from " + describe(peer));
  if (!known_op(w.op)) return unknown_op(peer, "clear-to-send", w.op);
  if (w.credits != 0) ZW_TRY(take_credits(peer, w.credits));
  Cts cts{w.op.seq, w.tag, from_wire(w.op), w.offset, w.bytes, w.key_len, {}};
  std::memcpy(cts.key.data(), payload.data() + sizeof w, w.key_len);
  if (cts.seq == seq_) ZW_TRY(check_desc(peer, cts.desc));
  note_seen(peer, cts.seq, cts.desc);
  state_[peer].cts.push_back(std::move(cts));
  return Status();
}

Status Rendezvous::unknown_op(int peer, const char* what, const OpWire& w) const {
  return Status(Code::kProtocolError, std::string(what) + " from " + describe(peer) +
                                          " names an operation this build does not know (kind " +
                                          std::to_string(w.kind) + ", algorithm " + std::to_string(w.algo) +
                                          ", dtype " + std::to_string(w.dtype) + ", reduction " + std::to_string(w.op) +
                                          "): are all ranks running the same zerowire version?");
}

Status Rendezvous::pump() {
  transport::Message msg;
  for (size_t p = 0; p < endpoints_.size(); ++p) {
    auto& ep = endpoints_[p];
    if (!ep || !state_[p].error.ok()) continue;
    for (;;) {
      Result<bool> got = ep->poll(&msg);
      if (!got.ok()) {
        // A peer that finished and left is no error until this rank needs it again.
        state_[p].error =
            Status(Code::kPeerFailed, "lost " + describe(static_cast<int>(p)) + ": " + got.status().message());
        break;
      }
      if (!got.value()) break;
      ZW_TRY(dispatch(static_cast<int>(p), msg));
    }
  }
  return Status();
}

Status Rendezvous::explain(const Status& failure) {
  Status why = pump();
  return why.ok() ? failure : why;
}

// Fails when `peer` is known to be gone; for local waits (peer == this rank), when a peer that still owes a
// write completion is gone.
Status Rendezvous::check_peer(int peer) {
  if (peer != rank_) {
    if (!state_[peer].error.ok()) return state_[peer].error;
    std::string why;
    if (transport_.peer_known_dead(peer, &why))
      return Status(Code::kPeerFailed, describe(peer) + " died (" + why + ")");
    return Status();
  }
  for (size_t p = 0; p < endpoints_.size(); ++p)
    if (endpoints_[p] && endpoints_[p]->writes_completed() < endpoints_[p]->writes_posted() && !state_[p].error.ok())
      return state_[p].error;
  return Status();
}

Status Rendezvous::wait_for(int peer, const char* what, uint64_t tag, Predicate done, bool local,
                            uint64_t* blocked_ns) {
  int idle_rounds = 0;
  waiting_peer_ = peer;
  waiting_what_ = what;
  uint64_t blocked_from = 0;
  uint64_t idle_until = 0;  // when the transport's last wait last found nothing (0: unknown, read the clock)
  if (blocked_ns) *blocked_ns = 0;
  for (;;) {
    ZW_TRY(pump());
    if (done()) {
      if (blocked_ns && blocked_from != 0) {
        const uint64_t until = idle_until != 0 ? idle_until : now_ns();
        *blocked_ns = until > blocked_from ? until - blocked_from : 1;
      }
      return Status();
    }
    if (interrupted_.load(std::memory_order_acquire))
      return Status(Code::kAborted, "interrupted while waiting for " + std::string(what) + " from " + describe(peer) +
                                        ": " + interrupt_reason_);
    auto now = Clock::now();
    if (blocked_ns && blocked_from == 0)
      blocked_from = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
    idle_until = 0;
    if (peer == rank_ || !state_[peer].error.ok()) ZW_TRY(check_peer(peer));
    if (deadline_.expired()) {
      const std::string waited = "timed out after " + seconds_text(timeout_s_) + " s waiting for " + what + " (" +
                                 tag_string(tag) + ") from " + describe(peer);
      // The neighbour this rank waits on is often only waiting itself: the ranks compare what they wait for.
      return blame_timeout(peer, waited);
    }
    if (now >= next_liveness_check_) {
      ZW_TRY(check_peer(peer));
      next_liveness_check_ = now + kLivenessPeriod;
    }
    for (size_t p = 0; p < state_.size(); ++p) send_credits_if_due(static_cast<int>(p), /*now=*/true);
    if (local && ++idle_rounds < 1000) {
      std::this_thread::yield();  // local completions do not wake wait_for_activity; they come soon
      continue;
    }
    auto sleep = std::min<std::chrono::nanoseconds>(deadline_.remaining(), kMaxSleep);
    transport_.wait_for_activity(std::chrono::duration_cast<std::chrono::microseconds>(sleep));
    if (blocked_ns) idle_until = transport_.last_idle_ns();
  }
}

Status Rendezvous::post_recv(int peer, const RegBuf& dst, size_t offset, size_t bytes, uint64_t tag) {
  if (bytes == 0) return Status();
  if (is_eager(bytes)) return post_eager(peer, dst.data() + offset, bytes, tag);
  if (dst.key->size() > kMaxKey) return Status(Code::kInternal, "remote key too large for a clear-to-send message");
  std::byte buf[transport::Message::kMaxControl];
  CtsWire w{};
  w.type = kCtrlCts;
  w.key_len = static_cast<uint8_t>(dst.key->size());
  w.op = to_wire(desc_, seq_);
  w.tag = tag;
  w.offset = offset;
  w.bytes = bytes;
  w.credits = static_cast<uint32_t>(state_[peer].owed_credits);  // slots 0..31 fit
  state_[peer].owed_credits &= ~uint64_t{0xFFFFFFFF};
  std::memcpy(buf, &w, sizeof w);
  std::memcpy(buf + sizeof w, dst.key->data(), dst.key->size());
  Status s = endpoints_[peer]->send(std::span<const std::byte>(buf, sizeof w + dst.key->size()));
  if (!s.ok()) return explain(Status(Code::kPeerFailed, "cannot reach " + describe(peer) + ": " + s.message()));
  return Status();
}

Status Rendezvous::send(int peer, const RegBuf& src, size_t offset, size_t bytes, uint64_t tag, uint64_t* ticket) {
  auto& ep = endpoints_[peer];
  if (bytes == 0 || is_eager(bytes)) {
    if (bytes != 0) ZW_TRY(send_eager(peer, src, offset, bytes, tag));
    if (bytes != 0) count_sent(peer, bytes);
    if (ticket) *ticket = ep->writes_posted();
    return Status();
  }
  auto& list = state_[peer].cts;
  auto match = [&] {
    return std::find_if(list.begin(), list.end(), [&](const Cts& c) { return c.seq == seq_ && c.tag == tag; });
  };
  ZW_TRY(wait_for(peer, "clear-to-send", tag, [&] { return match() != list.end(); }));
  auto it = match();
  if (it->bytes != bytes)
    return Status(Code::kDesync, describe(peer) + " expects " + std::to_string(it->bytes) + " bytes for " +
                                     tag_string(tag) + " of " + desc_.describe() + " but " + describe(rank_) + " has " +
                                     std::to_string(bytes));
  Status s = ep->write(*src.mr, offset, it->key_bytes(), it->offset, bytes, notify_value(tag));
  list.erase(it);
  if (!s.ok()) return explain(Status(s.code(), "write to " + describe(peer) + " failed: " + s.message()));
  count_sent(peer, bytes);
  if (ticket) *ticket = ep->writes_posted();
  return Status();
}

void Rendezvous::set_peer_links(monitor::PeerLinks* links) { links_ = links ? links->counters() : nullptr; }

void Rendezvous::count_sent(int peer, uint64_t bytes) {
  if (links_) links_[peer].sent_bytes.store(state_[peer].sent_bytes += bytes, std::memory_order_relaxed);
}

void Rendezvous::count_received(int peer, uint64_t bytes, uint64_t blocked_ns) {
  if (!links_) return;
  PeerState& st = state_[peer];
  monitor::PeerLinks::Link& l = links_[peer];
  l.received_bytes.store(st.received_bytes += bytes, std::memory_order_relaxed);
  if (blocked_ns == 0) return;
  l.wait_ns.store(st.wait_ns += blocked_ns, std::memory_order_relaxed);
  l.waits.store(++st.waits, std::memory_order_relaxed);
}

Status Rendezvous::wait_recv(int peer, uint64_t tag, size_t bytes) {
  if (bytes == 0) return Status();
  auto& list = state_[peer].notifies;
  uint64_t want = notify_value(tag);
  auto arrived = [&] { return std::find(list.begin(), list.end(), want) != list.end(); };
  uint64_t blocked = 0;
  ZW_TRY(wait_for(peer, "data", tag, arrived, /*local=*/false, links_ ? &blocked : nullptr));
  count_received(peer, bytes, blocked);
  list.erase(std::find(list.begin(), list.end(), want));
  return Status();
}

Status Rendezvous::wait_write(int peer, uint64_t ticket) {
  auto& ep = endpoints_[peer];
  return wait_for(
      peer, "local write completion", 0, [&] { return ep->writes_completed() >= ticket; }, true);
}

Status Rendezvous::on_abort(int peer, std::span<const std::byte> payload) {
  AbortWire w;
  if (payload.size() < sizeof w) return Status(Code::kProtocolError, "malformed abort from " + describe(peer));
  std::memcpy(&w, payload.data(), sizeof w);
  if (w.listed > kMaxAbortLost || w.lost_total < w.listed)
    return Status(Code::kProtocolError, "malformed abort from " + describe(peer));
  PeerState& st = state_[peer];
  st.aborted = true;
  st.lost.clear();
  std::string lost;
  for (size_t i = 0; i < w.listed; ++i) {
    if (w.lost[i] >= state_.size())
      return Status(Code::kProtocolError, "abort from " + describe(peer) + " names rank " + std::to_string(w.lost[i]) +
                                              " of a world of " + std::to_string(state_.size()));
    st.lost.push_back(static_cast<int>(w.lost[i]));
    lost += (i == 0 ? ", having lost " : ", ") + describe(static_cast<int>(w.lost[i]));
  }
  if (w.lost_total > w.listed) lost += " and " + std::to_string(w.lost_total - w.listed) + " more ranks";
  const std::string reason(reinterpret_cast<const char*>(payload.data()) + sizeof w, payload.size() - sizeof w);
  return Status(Code::kAborted, describe(peer) + " aborted the communicator" + lost + ": " + reason);
}

std::vector<int> Rendezvous::lost_ranks() {
  std::vector<int> lost;
  std::vector<bool> listed(state_.size(), false);
  const auto add = [&](int p) {
    if (p != rank_ && !listed[static_cast<size_t>(p)]) {
      listed[static_cast<size_t>(p)] = true;
      lost.push_back(p);
    }
  };
  std::string why;
  for (size_t p = 0; p < state_.size(); ++p)
    if (endpoints_[p] && transport_.peer_known_dead(static_cast<int>(p), &why)) add(static_cast<int>(p));
  for (size_t p = 0; p < state_.size(); ++p)
    if (!state_[p].error.ok() && !state_[p].aborted) add(static_cast<int>(p));
  for (const PeerState& st : state_)
    for (int p : st.lost) add(p);
  return lost;
}

void Rendezvous::broadcast_abort(const Status& reason) {
  std::byte buf[transport::Message::kMaxControl];
  AbortWire w{};
  w.type = kCtrlAbort;
  const std::vector<int> lost = lost_ranks();
  w.lost_total = static_cast<uint32_t>(lost.size());
  for (; w.listed < std::min(lost.size(), kMaxAbortLost); ++w.listed) w.lost[w.listed] = static_cast<uint32_t>(lost[w.listed]);
  std::memcpy(buf, &w, sizeof w);
  // One control message: a longer reason keeps its head (which operation, where) and its tail (whom it could not
  // reach, why), joined by " ... ". Whom this rank lost travels in the header, whatever the cut leaves.
  std::string text = reason.message();
  const size_t room = sizeof buf - sizeof w, head = room / 3;
  if (text.size() > room) text = text.substr(0, head) + " ... " + text.substr(text.size() - (room - head - 5));
  std::memcpy(buf + sizeof w, text.data(), text.size());
  for (auto& ep : endpoints_)
    if (ep) (void)ep->send(std::span<const std::byte>(buf, sizeof w + text.size()));
}

}  // namespace zw::internal
