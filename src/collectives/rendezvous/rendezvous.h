// Receiver-driven rendezvous over a transport: the data path every algorithm is written against.
//
//   receiver: post_recv(peer, dst, offset, bytes, tag)  -> sends clear-to-send {op, seq, tag, key, offset, bytes}
//   sender:   send(peer, src, offset, bytes, tag)       -> waits for that CTS, then one-sided write with notify
//   receiver: wait_recv(peer, tag)                      -> waits for the notify of (seq, tag)
//
// Small transfers (at most EagerConfig::bytes) skip the clear-to-send round trip: the sender writes into a slot
// of the receiver's pre-registered inbox and announces it with an EAGER message carrying the same sequence
// number and description; the receiver copies the bytes out (at post_recv or on arrival, whichever is later)
// and returns the slot: on the next EAGER or clear-to-send message it sends that sender, or in a CREDIT message
// once half of that sender's slots are owed or before this rank blocks in a wait. Both sides decide
// eager-or-not from the size alone.
//
// Every CTS and EAGER message carries the operation's sequence number and description, so a peer that issued a
// different collective (or a different count, dtype, op, root or algorithm) is caught on its first message and named.
// Messages for later operations (a fast peer running ahead) are kept until this rank gets there.
// Waiting never hangs: each wait ends at the operation's deadline, fails as soon as any peer is known dead
// or an endpoint fails, and fails when a peer broadcast an abort. Zero-byte transfers are skipped by both
// sides, so algorithms need no special cases for empty blocks.
// Not thread-safe: used by one thread at a time, the holder of the communicator's run token (comm_impl.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "collectives/buffers.h"
#include "collectives/monitor/peer_links.h"
#include "collectives/op_desc.h"
#include "common/clock.h"
#include "transport/transport.h"
#include "zerowire/store.h"

namespace zw::internal {
struct OpWire;  // rendezvous_wire.h

// 40-bit tag: phase (2 bits) | step (18 bits) | chunk (20 bits).
inline uint64_t make_tag(unsigned phase, unsigned step, uint64_t chunk) {
  return (uint64_t(phase & 3) << 38) | (uint64_t(step & 0x3FFFF) << 20) | (chunk & 0xFFFFF);
}

// A non-owning, allocation-free reference to a `bool()` callable (the waits run once per chunk).
class Predicate {
 public:
  template <typename F>
  Predicate(const F& f)  // NOLINT(google-explicit-constructor)
      : obj_(&f), call_([](const void* o) { return (*static_cast<const F*>(o))(); }) {}
  bool operator()() const { return call_(obj_); }

 private:
  const void* obj_;
  bool (*call_)(const void*);
};

// Where each rank runs, for error messages.
struct PeerInfo {
  std::string host;
  int pid = 0;
};

// This rank's host name as its peers see it: ZW_HOSTNAME, else gethostname (blame.cc).
std::string rank_host_name();

struct EagerConfig {
  size_t bytes = 0;  // largest eager transfer; 0 disables eager transfers
  int slots = 0;     // inbox slots per peer, at most 64
};

class Rendezvous {
 public:
  Rendezvous(int rank, transport::Transport& transport, std::vector<std::unique_ptr<transport::Endpoint>>& endpoints,
             const std::vector<PeerInfo>& peers);

  // Starts operation `seq`; messages a fast peer already sent for it are checked now.
  Status begin_op(uint64_t seq, const OpDesc& desc, Deadline deadline, double timeout_s);
  // Waits until every write this rank posted has completed locally (sources reusable, nothing in flight).
  Status end_op();

  Status post_recv(int peer, const RegBuf& dst, size_t offset, size_t bytes, uint64_t tag);
  // Returns once the write is posted; `ticket` (optional) identifies it for wait_write.
  Status send(int peer, const RegBuf& src, size_t offset, size_t bytes, uint64_t tag, uint64_t* ticket = nullptr);
  Status wait_recv(int peer, uint64_t tag, size_t bytes);
  // Waits until the write identified by `ticket` to `peer` completed locally (its source may be reused).
  Status wait_write(int peer, uint64_t ticket);

  // Turns on eager transfers: `inbox` holds size × slots slots of config.bytes (sender-major), and
  // peer_inbox_keys[p] is the remote key of rank p's inbox.
  void enable_eager(const EagerConfig& config, const RegBuf& inbox,
                    std::vector<std::vector<std::byte>> peer_inbox_keys);

  // Point-to-point transfers (send_recv batches) are numbered per (sender, receiver) pair: the n-th send from A to B
  // matches B's n-th receive from A. next_*_seq hands out the next number; use_seq makes the following post_recv /
  // send / wait_recv calls belong to that transfer (p2p tags use kPhaseP2P, so they never meet a collective's).
  // Messages of send_recv batches are never compared with a collective's description (check_desc).
  uint64_t next_send_seq(int peer) { return ++state_[peer].p2p_sent; }
  uint64_t next_recv_seq(int peer) { return ++state_[peer].p2p_received; }
  void use_seq(uint64_t seq) { seq_ = seq; }

  // Makes every current and later wait fail with kAborted and `why` (callable from any thread; the first
  // interrupt's reason is kept).
  void interrupt(const std::string& why) {
    std::lock_guard<std::mutex> lock(interrupt_mutex_);
    if (interrupted_.load(std::memory_order_relaxed)) return;
    interrupt_reason_ = why;  // written once, before the flag that publishes it
    interrupted_.store(true, std::memory_order_release);
  }

  // Best effort: tells every peer that this communicator failed, with the reason.
  void broadcast_abort(const Status& reason);
  // After this rank failed and told its peers: waits (briefly) until no peer can still write into the failed
  // operation's buffers (drain.cc).
  void drain_after_failure();
  // Best effort: tells every peer that this rank refused its call of the current operation (refusal.h).
  void broadcast_refusal(const std::string& why);

  // "rank 3 (host node7, pid 4242)".
  std::string describe(int rank) const;
  // The other ranks on this host whose process is stopped (/proc state T), for timeout errors (blame.cc).
  std::vector<int> stopped_local_ranks() const;
  // The store timed-out operations compare reports through (blame.cc); without one a timeout names what this rank
  // sees alone.
  void set_blame_store(std::shared_ptr<Store> store) { blame_store_ = std::move(store); }
  // The transport's name ("shm", "tcp", ...), for algorithms that suit one transport only.
  const char* transport_name() const { return transport_.name(); }
  // Per-peer byte and wait counters to update (the communicator's monitor), or null.
  void set_peer_links(monitor::PeerLinks* links);

 private:
  struct Cts {
    uint64_t seq;
    uint64_t tag;
    OpDesc desc;
    uint64_t offset;
    uint64_t bytes;
    uint8_t key_len;
    std::array<std::byte, 184> key;  // the remote key (fits a clear-to-send message)
    std::span<const std::byte> key_bytes() const { return {key.data(), key_len}; }
  };
  struct EagerPosted {  // a receive posted before its eager data arrived
    uint64_t seq, tag;
    std::byte* dst;
    size_t bytes;
  };
  struct EagerArrived {  // eager data that arrived before its receive was posted
    uint64_t seq, tag, bytes;
    OpDesc desc;
    uint32_t slot;
  };
  struct PeerState {
    std::vector<Cts> cts;            // clear-to-send messages not yet consumed
    std::vector<uint64_t> notifies;  // notify values not yet consumed
    std::vector<EagerPosted> eager_posted;
    std::vector<EagerArrived> eager_arrived;
    uint64_t free_slots = 0;    // bit i: slot i of this peer's inbox may be written by this rank
    uint64_t owed_credits = 0;  // bit i: slot i of this rank's inbox for the peer was emptied, not yet returned
    Status error;               // the endpoint failed (raised only when this peer is waited on)
    uint64_t p2p_sent = 0;      // point-to-point transfers to this peer so far
    uint64_t p2p_received = 0;  // point-to-point transfers from this peer so far
    std::vector<std::pair<uint64_t, std::string>> refusals;  // operations ahead that the peer refused, and why
    bool aborted = false;                                    // the peer sent ABORT: it sends nothing more (drain.cc)
    std::vector<int> lost;  // the ranks its ABORT said it had lost
    // Running totals of the monitor's link counters (links_), which are only stored (peer_links.h).
    uint64_t sent_bytes = 0, received_bytes = 0, wait_ns = 0, waits = 0;
    uint64_t seen_seq = 0;  // the last collective this peer's messages belonged to (blame.cc)
    OpDesc seen_desc;
  };

  // The ranks this rank has lost, for its ABORT: found dead by the transport, then those whose link failed, then
  // those that aborting peers said they lost (a peer that aborted is not lost: it said why it stopped).
  std::vector<int> lost_ranks();
  Status on_abort(int peer, std::span<const std::byte> payload);
  // The monitor's link counters (links_), when set: running totals in PeerState, stored into the counters.
  void count_sent(int peer, uint64_t bytes);
  void count_received(int peer, uint64_t bytes, uint64_t blocked_ns);
  bool is_eager(size_t bytes) const { return eager_.bytes > 0 && bytes <= eager_.bytes; }
  Status post_eager(int peer, std::byte* dst, size_t bytes, uint64_t tag);
  Status send_eager(int peer, const RegBuf& src, size_t offset, size_t bytes, uint64_t tag);
  Status on_eager(int peer, std::span<const std::byte> payload);
  Status on_credit(int peer, std::span<const std::byte> payload);
  // Slots returned by `peer` (a CREDIT message, or piggybacked on its EAGER or clear-to-send messages).
  Status take_credits(int peer, uint64_t slots);
  // Returns the slots owed to `peer` in a CREDIT message once at least half of them are owed, or any are
  // owed with `now`.
  void send_credits_if_due(int peer, bool now = false);
  // Copies arrived eager data to `dst`, marks the receive done and returns the slot to the sender.
  Status consume_eager(int peer, const EagerArrived& arrived, std::byte* dst, size_t bytes);
  Status pump();
  // A send to `peer` failed with `failure`: if the peer said why before it left (an abort), that explains it.
  Status explain(const Status& failure);
  Status dispatch(int peer, const transport::Message& msg);
  Status check_desc(int peer, const OpDesc& desc) const;
  // A message whose operation fields name no known kind, algorithm, dtype or reduction (rendezvous_wire.h).
  Status unknown_op(int peer, const char* what, const OpWire& w) const;
  // Refusals (refusal.cc): a REFUSE message; those kept for the operation that begins.
  Status on_refusal(int peer, std::span<const std::byte> payload);
  Status check_refusals();
  Status refused_error(int peer, uint64_t seq, const std::string& why) const;
  // The blame protocol (blame.cc): this rank's report, a peer's query, and the error of a timed-out wait.
  std::string blame_record() const;
  void on_blame_query(int peer, std::span<const std::byte> payload);
  Status blame_timeout(int peer, const std::string& waited);
  void note_seen(int peer, uint64_t seq, const OpDesc& desc) {
    if (is_p2p(desc.kind) || seq < state_[peer].seen_seq) return;
    state_[peer].seen_seq = seq;
    state_[peer].seen_desc = desc;
  }
  // Pumps until done(). With `blocked_ns`, how long it waited once a pump had not brought it (0: it had: data already
  // there costs no clock read). The span ends at the transport's last look that found nothing (last_idle_ns) where it
  // knows it, so that the wait's end costs no clock read either; else at a clock read.
  Status wait_for(int peer, const char* what, uint64_t tag, Predicate done, bool local = false,
                  uint64_t* blocked_ns = nullptr);
  Status check_peer(int peer);
  // Bit 63 is clear: it marks the notifications of eager writes, which carry no meaning of their own.
  uint64_t notify_value(uint64_t tag) const { return notify_value(seq_, tag); }
  // For a message of operation `seq` (an eager message may be consumed while another transfer's seq is current).
  static uint64_t notify_value(uint64_t seq, uint64_t tag) {
    return ((seq & 0x7FFFFF) << 40) | (tag & 0xFFFFFFFFFFull);
  }

  int rank_;
  transport::Transport& transport_;
  std::vector<std::unique_ptr<transport::Endpoint>>& endpoints_;
  const std::vector<PeerInfo>& peers_;
  std::vector<PeerState> state_;
  uint64_t seq_ = 0;
  OpDesc desc_;
  Deadline deadline_ = Deadline::never();
  double timeout_s_ = 0;
  Clock::time_point next_liveness_check_{};
  std::atomic<bool> interrupted_{false};
  std::mutex interrupt_mutex_;    // serializes interrupt()
  std::string interrupt_reason_;  // set once by the first interrupt(), read after interrupted_ is seen true
  EagerConfig eager_;
  RegBuf inbox_;
  std::vector<std::vector<std::byte>> peer_inbox_keys_;
  monitor::PeerLinks::Link* links_ = nullptr;  // per-peer counters (monitoring), or null
  int waiting_peer_ = -1;                // what the current wait is for (blame.cc)
  const char* waiting_what_ = "";
  std::shared_ptr<Store> blame_store_;
  uint64_t answered_blame_ = 0;  // the last operation whose query this rank answered
};

}  // namespace zw::internal
