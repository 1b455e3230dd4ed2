// One RC connection to one peer: the QP, its CQ, the peer's eager ring (where every message of ours lands), the
// staging ring of the send queue, and the flow control that keeps the peer's ring and receive queue from
// overflowing (no RNR).
//
// Wire protocol (all on the one RC QP, so RC ordering holds between every item). Every message is one RDMA
// WRITE (inline when it fits) into the next slot of the receiver's eager ring, a registered array of kRecvDepth slots of kRingSlotBytes per (peer, QP) published in the address
// (ring_layout below). A slot holds a 16-byte header {type, flags, size, seq32, notify}, `size` body bytes padded
// to 8, and an 8-byte check word: a hash of the sequence number, the header and the padded body (never 0). The
// receiver zeroes every slot it consumed, so a slot is ready when its header carries the expected sequence number
// and its check word matches what the receiver computes: it sees a message by reading its memory, without
// waiting for a completion (what perftest's ib_write_lat and MVAPICH's RDMA fast path do). The check word does
// not depend on the order in which the bytes of one message become visible (a kernel memcpy on a software
// device may use `rep movsb`, whose stores the CPU may reorder).
// Wake-ups: a plain WRITE makes no completion at the receiver, so a receiver asleep on the completion channel
// (wait_for_activity) would never wake. So a message goes as WRITE_WITH_IMM (immediate = its sequence number;
// it takes one posted receive and makes a receive completion, which wakes the channel) whenever the receiver's
// sleep flag is set: a word in the sender's control block that the receiver RDMA-writes. The sender stores its
// posted count into its control block (sequentially consistent), then reads the flag, then posts. Before
// sleeping, a receiver whose flag was clear sets it and RDMA-READs the sender's posted count c (the READ
// executes after the flag write at the sender: RC order, and a DMA read does not pass an earlier DMA write),
// then waits until message c has landed: a message not counted in c was counted after the READ, hence its
// sender saw the flag and sends it with an immediate (a store-load fence on the sender, the READ on the
// receiver's side: the two cannot both miss each other). The flag starts set, and the receiver clears it (one
// RDMA WRITE) once it delivered a few messages without sleeping, so a busy pair exchanges plain WRITEs. Receive
// completions are reaped in batches.
//   - write() of at most kMaxInlineWrite bytes from host memory into host memory: one {kInline, size, notify}
//     message carrying {address, rkey} + the bytes, or only the bytes (flag kSameTarget) when the target is the
//     previous kInline's of this QP (both sides remember it: messages are taken in order); the receiver copies
//     them into place, after checking that the range lies in a live registration of its own with that rkey (the
//     registration cache; a one-entry hint skips the lookup while no registration was destroyed), and then
//     delivers the Notify. An 8-byte write is 32 bytes on the wire then (48 with the target).
//     The write counts as complete (source reusable) once posted, the bytes being copied by then, unless an
//     earlier write is still pending (writes complete in order).
//   - a larger write(): RDMA WRITE(s) of the payload (unsignaled), then a {kNotify, notify} message flagged
//     kAfterData, always with an immediate: the receiver delivers it only once that message's receive completion
//     was reaped (receive completions are in order), which the verbs ordering rules guarantee to follow the
//     placement of every earlier WRITE of the QP; memory polling alone guarantees it on no HCA.
//   - send(): a {kControl, size} message with the payload.
//   - a part of a write striped over several QPs (ZW_IB_QPS_PER_CONNECTION > 1, see verbs_endpoint.h): the same
//     WRITE(s) followed by a {kPart, notify} message (kAfterData), which poll() hands to the endpoint as a part.
//   - wait_connected(): a signaled {kHello} message; its successful completion means the peer's QP acknowledged
//     it, i.e. the peer called connect() (its QP is in RTR; with rdma_cm, the CM exchange is over on both
//     sides). Until then the QP retransmits the hello every ack timeout (4.096 us * 2^ZW_IB_TIMEOUT), so a peer
//     that connects late delays the pair by up to one timeout.
// Flow control: message k (from 1) goes to ring slot (k - 1) % kRecvDepth (and takes one posted receive when it
// carries an immediate, which its header says: kImm). The receiver counts messages consumed (slot zeroed) and
// receives re-posted (in batches, after their completions were reaped); it RDMA-writes the consumed count,
// once every consumed kImm message's receive was re-posted, into the sender's credit word (registered memory published in the address) every kCreditBatch messages. A message is posted
// only while posted - credited < kRecvDepth. Credit updates are plain RDMA WRITEs, which consume no receive and
// no slot, so returning credits never needs credits (no deadlock) and both ranks may flood each other: a sender
// waiting for credits keeps consuming (and crediting) its own inbound into the inbox.
// Selective signalling: only a pending write's last message, the sleep READ and every kSignalEvery-th other WR
// are signaled; a signaled
// completion retires every earlier WR of the send queue (RC completes in order).
//
// Threading: mu_ guards the QP's posting side, the CQ, the ring and every counter; the endpoint thread and
// wait_for_activity() (any thread) take it, except that an empty poll() mostly does not: it reads atomic
// mirrors of the inbox size and the next sequence number and the next slot's header (nothing_arrived()), and
// takes the lock only when they show something, an error, or every kEmptyPollsPerCq-th poll (to poll the CQ).
// fail() may be called from the async-event thread.
// Non-goals: striping (the endpoint splits writes over its connections), reconnecting after an error, SRQ.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/verbs/verbs_address.h"
#include "transport/verbs/verbs_config.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_memory_region.h"
#include "transport/verbs/verbs_reg_cache.h"
#include "transport/verbs/verbs_ring_wire.h"

namespace zw::transport::verbs {

// The ring covers a full tx depth of 128 writes (one message each) so that a sender is not held up by a
// receiver that polls late; the send queue holds their WRITE + message pairs.
inline constexpr int kRecvDepth = 256;                // ring slots and receives per connection (the peer's window)
inline constexpr int kCreditBatch = kRecvDepth / 4;   // freed slots per credit update
inline constexpr int kSendDepth = 512;                // send-queue work requests
inline constexpr int kSignalEvery = 64;               // longest run of unsignaled work requests
inline constexpr double kLeftGrace = 2.0;  // seconds between a peer's goodbye and its "left" error
// The slot format (kHeaderBytes, kRingSlotBytes, kMaxInlineWrite, the check word): verbs_ring_wire.h.

// Layout of the registered array a rank publishes as credit=ADDR/RKEY (and in its rdma_cm private data): one
// control block of kCtlWords uint64_t per (peer * qps + QP index) — [kCreditWord] how many of our messages the
// peer freed (the peer writes it), [kSleepWord] nonzero while the peer may sleep (the peer writes it; it starts
// set), [kPostedWord] how many messages we posted to the peer (we write it, the peer reads it) — then from a
// 64-byte boundary one eager ring of kRecvDepth slots per (peer * qps + QP index). Both ranks derive it from
// the world size and qps they share.
inline constexpr size_t kCtlWords = 4;
inline constexpr size_t kCreditWord = 0, kSleepWord = 1, kPostedWord = 2;
inline constexpr size_t kRingBytes = static_cast<size_t>(kRecvDepth) * kRingSlotBytes;
inline size_t ring_array_offset(int world_size, int qps) {
  return (static_cast<size_t>(world_size) * static_cast<size_t>(qps) * kCtlWords * sizeof(uint64_t) + 63) / 64 * 64;
}
inline size_t credit_array_bytes(int world_size, int qps) {
  return ring_array_offset(world_size, qps) + static_cast<size_t>(world_size) * static_cast<size_t>(qps) * kRingBytes;
}

// Where our control block (for the peer's messages to us) and our eager ring live in the peer's array.
struct CreditTarget {
  uint64_t addr = 0;       // remote address of the control block (kCtlWords words)
  uint32_t rkey = 0;       // rkey of the whole array
  uint64_t ring_addr = 0;  // remote address of slot 0 of our ring there
  // The target for slot `slot` (peer rank * qps + QP index) of the array at `base` of a world of `world_size`.
  static CreditTarget in_array(uint64_t base, uint32_t rkey, int world_size, int qps, uint64_t slot) {
    return CreditTarget{base + slot * kCtlWords * sizeof(uint64_t), rkey,
                        base + ring_array_offset(world_size, qps) + slot * kRingBytes};
  }
};

// The connection's lock (mu_ below): a test-and-set word, held for microseconds on the data path. Under emulation
// (the Soft-RoCE guest) a pthread mutex lock + unlock costs ~130 cycles against ~20 for this, twice per message.
// A waiter spins briefly, then yields, then naps 20 us per try: the only long holder is a wait for credits or
// send-queue room (wait_for), which naps itself.
class ConnLock {
 public:
  void lock() {
    if (!flag_.exchange(true, std::memory_order_acquire)) return;
    lock_slow();
  }
  bool try_lock() { return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire); }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  void lock_slow();
  std::atomic<bool> flag_{false};
};

class VerbsConnection {
 public:
  // Creates the CQ and the QP (moved to INIT) and posts the receives; `ctl` is this rank's control block for
  // the peer (kCtlWords, see above; its kSleepWord set), `ring` the kRingBytes (zeroed, registered for remote
  // write) that the peer's messages land in.
  // `registry` (the transport's registration cache) validates the targets of inline writes from the peer.
  static Result<std::shared_ptr<VerbsConnection>> create(std::shared_ptr<VerbsDevice> device, int rank, int peer,
                                                         uint32_t psn, volatile uint64_t* ctl,
                                                         std::byte* ring, const VerbsConfig& config,
                                                         std::shared_ptr<const VerbsRegCache> registry);
  ~VerbsConnection();
  VerbsConnection(const VerbsConnection&) = delete;
  VerbsConnection& operator=(const VerbsConnection&) = delete;

  int peer() const { return peer_; }
  uint32_t qp_num() const { return qp_->qp_num; }
  ibv_qp* qp() const { return qp_; }
  ibv_cq* cq() const { return cq_; }

  // Moves the QP to RTR and RTS towards the peer's QP `dest_qpn` (transport's connect()).
  Status connect(const VerbsAddress& peer_address, uint32_t dest_qpn, const CreditTarget& credit);
  // The rdma_cm path (verbs_rdma_cm.h): moves the QP to RTR and RTS with the attributes rdma_cm computed
  // (rdma_init_qp_attr) plus our ZW_IB_TIMEOUT/RETRY_CNT (and ZW_IB_TC/SL when set) and no RNR retry.
  // connected() stays false until mark_connected(): the CM exchange is not over, the peer's QP may not be ready.
  Status connect_cm(ibv_qp_attr rtr, int rtr_mask, ibv_qp_attr rts, int rts_mask, const CreditTarget& credit,
                    const std::string& peer_host);
  void mark_connected();

  // --- endpoint thread ---
  // Waits until the QP is connected (rdma_cm: until the CM exchange is over), then for the peer's hello ack.
  Status wait_connected(Deadline deadline);
  Status post_write(const VerbsMemoryRegion& local, size_t local_offset, const VerbsRemoteKey& key,
                    size_t remote_offset, size_t bytes, uint64_t notify, bool part = false);
  Status post_control(std::span<const std::byte> payload);
  // The next message; *part says it closes one part of a striped write (its notify is the write's).
  Result<bool> poll(Message* out, bool* part);
  uint64_t writes_posted() const { return writes_posted_.load(std::memory_order_acquire); }
  uint64_t writes_completed() const { return writes_completed_.load(std::memory_order_acquire); }
  // The sticky error (or the peer's "left" error once its grace is over); inline: two loads while neither is set.
  Status error() const {
    if (!failed_.load(std::memory_order_acquire) && !left_.load(std::memory_order_acquire)) return Status();
    return error_slow();
  }
  // The endpoint is gone: stop the QP (its work requests flush) and drop queued messages.
  void close();

  // --- any thread ---
  // Polls the CQ and moves ready ring messages into the inbox (so that their slots and credits go back); true
  // when a message or a not-yet-reported error is waiting for poll().
  bool progress_and_check();
  // Asks for a completion event on the channel for the next completion.
  void arm();
  // Before sleeping on the channel (see "Wake-ups" above): begin_sleep() sets our sleep flag at the peer and
  // posts the READ of its posted count when the flag was clear; finish_sleep() waits (until `deadline`) for that
  // READ and for every message it counted. finish_sleep() is true when sleeping is safe; false when a message or
  // error is waiting (progress_and_check() tells) or the deadline passed.
  void begin_sleep();
  bool finish_sleep(Deadline deadline);
  bool connected() const { return connected_.load(std::memory_order_acquire); }
  // Records the sticky error (first wins); `peer_gone` says the peer stopped acknowledging (a transport retry
  // exceeded: its process or host is gone or unreachable), which peer_known_dead() reports.
  Status fail(Status status, bool peer_gone);
  bool peer_gone() const { return peer_gone_.load(std::memory_order_acquire); }
  // The peer shut its transport down in order. After kLeftGrace (time for the acknowledgements and messages it
  // sent before leaving to be polled here) later calls fail with `status`, logged at INFO, not WARN.
  void peer_left(Status status);
  std::string why_failed() const;
  // The other QPs of the same peer: a wait for credits or send-queue room also progresses them (try-lock), so
  // two ranks flooding each other with striped writes keep returning each other's credits on every QP.
  void set_siblings(std::vector<VerbsConnection*> siblings) { siblings_ = std::move(siblings); }

 private:
  using WireHeader = RingHeader;  // the slot format: verbs_ring_wire.h
  using MsgType = RingType;
  static constexpr MsgType kHello = kRingHello, kNotify = kRingNotify, kControl = kRingControl, kPart = kRingPart,
                           kInline = kRingInline;
  static constexpr uint8_t kAfterData = kRingAfterData;  // deliver only after the message's receive completion
  static constexpr uint8_t kImm = kRingImm;              // sent with an immediate: it took one of our posted receives
  static constexpr uint8_t kSameTarget = kRingSameTarget;  // a kInline without {address, rkey}: the previous one's
  struct Inbound {
    Message msg;  // what poll() returns
    bool part;    // a kPart message (msg.kind is kNotify)
  };
  // wr_id layout: work-request index (send queue) << kTagBits | these bits.
  static constexpr uint64_t kWriteEndBit = 1;  // the signaled last work request of a write()
  static constexpr uint64_t kRecvBit = 2;      // a receive
  static constexpr uint64_t kHelloBit = 4;     // the hello
  static constexpr uint64_t kReadBit = 8;      // the READ of the peer's posted count (begin_sleep)
  static constexpr int kTagBits = 4;

  VerbsConnection(std::shared_ptr<VerbsDevice> device, int rank, int peer, uint32_t psn,
                  volatile uint64_t* ctl, std::byte* ring, const VerbsConfig& config,
                  std::shared_ptr<const VerbsRegCache> registry);
  Status create_queues();
  Status modify_to_init();
  // Everything below runs with mu_ held.
  // Posts `count` more receives (no buffer: each takes one WRITE_WITH_IMM).
  Status post_recvs(uint64_t count);
  Status progress_locked();
  Status handle_completion(const ibv_wc& wc);
  Status completion_error(const ibv_wc& wc) const;
  // The slot of the next ring message and its header once all of it landed (sequence and check word), else null;
  // *oversize: its header claims an impossible size (malformed, not torn). Consumes nothing.
  std::byte* peek_slot(WireHeader* header, size_t* used, bool* oversize) const;
  // Zeroes a taken slot (the free state the check word relies on) and moves past it (next_seq_ for the lock-free
  // empty poll).
  void release_slot(std::byte* slot, size_t used);
  // The next ring message, if its slot is ready (verbs_connection_ring.cc): consumes the slot, returns true.
  Result<bool> take_slot(Message* out, bool* part);
  // take_slot() for the common message, a kInline to the previous target that needs nothing but its copy (no
  // immediate, no kAfterData, no CQ poll or credits due); false (nothing consumed) leaves it to take_slot().
  bool take_common(Message* out);
  // Delivers the ready slot `data` (header already read and checked); *deliver is false for a hello.
  Status deliver_slot(const WireHeader& header, const std::byte* body, Message* out, bool* part, bool* deliver);
  // Copies the `bytes` at `data` to the current inline target (inline_address_seen_, inline_rkey_seen_).
  Status receive_inline(const std::byte* data, size_t bytes, uint64_t notify, Message* out);
  // Moves every ready ring message into inbox_.
  Status drain_ring();
  // poll() without the lock: true when nothing can be delivered now (no inbox, the next slot does not carry
  // the next sequence number, no error) and this poll need not poll the CQ. Endpoint thread only.
  bool nothing_arrived() const;
  Status error_slow() const;  // error() once failed_ or left_ is set
  Status malformed(const std::string& why);
  // `tag` (kWriteEndBit, kHelloBit or 0) goes into the wr_id; a tagged work request is always signaled.
  Status post_send_wr(ibv_send_wr* wr, uint64_t tag);
  // The message holds the header, then `prefix`, then `payload` (header.size counts both).
  Status post_message(MsgType type, uint64_t notify, std::span<const std::byte> payload, uint64_t tag,
                      std::span<const std::byte> prefix = {}, uint8_t flags = 0);
  Status wait_for(bool (VerbsConnection::*ready)() const, const char* what);
  bool sq_has_room() const { return sq_posted_ - sq_done_ < static_cast<uint64_t>(kSendDepth); }
  bool has_send_credit() const {
    return sends_posted_ - ctl_[kCreditWord] < static_cast<uint64_t>(kRecvDepth);
  }
  // RDMA-writes `value` into the word `word` of our control block at the peer (inline, unsignaled).
  Status write_peer_word(size_t word, uint64_t value);
  // Re-posts the reaped receives and, every kCreditBatch freed slots, writes the count to the peer.
  Status return_credits();
  Status send_hello_locked();
  std::string peer_desc() const;

  const std::shared_ptr<VerbsDevice> device_;
  const int rank_;
  const int peer_;
  const uint32_t psn_;
  volatile uint64_t* const ctl_;  // our control block for the peer (kCtlWords; two are written by its NIC)
  std::byte* const ring_;                       // kRecvDepth slots written by the peer's NIC (not owned)
  const VerbsConfig config_;
  const std::shared_ptr<const VerbsRegCache> registry_;  // validates inline-write targets (may be null)
  VerbsRegCache::LiveHint inline_hint_;  // the registration the last inline write landed in (under mu_)
  std::string peer_host_;  // from the peer's address (error messages)
  std::vector<VerbsConnection*> siblings_;  // the peer's other QPs (same owners, same lifetime)

  ibv_cq* cq_ = nullptr;             // owned; send and receive completions
  ibv_qp* qp_ = nullptr;             // owned
  std::vector<std::byte> send_buf_;  // kSendDepth staging slots, by send-queue index
  ibv_mr* send_mr_ = nullptr;        // owned
  uint32_t max_inline_ = 0;          // what the QP accepted
  CreditTarget credit_target_;       // where our credit count and our messages go

  mutable ConnLock mu_;
  std::deque<Inbound> inbox_;     // taken from the ring while the endpoint thread was not polling
  uint64_t sq_posted_ = 0;        // send-queue work requests posted
  uint64_t sq_done_ = 0;          // ... known complete
  int unsignaled_run_ = 0;        // unsignaled work requests since the last signaled one
  uint64_t sends_posted_ = 0;     // messages posted (each takes one of the peer's slots and receives)
  uint64_t consumed_ = 0;         // peer messages taken from the ring (their slots zeroed)
  uint64_t recvs_reaped_ = 0;     // receive completions polled (one per peer message, in order)
  uint64_t recvs_reposted_ = 0;   // receives posted again after their completion
  uint64_t advertised_ = 0;       // free count last written to the peer's credit word
  uint64_t imm_consumed_ = 0;     // ... of which carried an immediate (took a receive)
  uint64_t imm_seen_ = 0;         // sequence number of the last receive completion reaped
  uint32_t since_reap_ = 0;       // messages taken from the ring since the CQ was last polled
  bool sleep_flag_ = true;        // our sleep flag at the peer is set (or its clearing not yet posted)
  bool sleep_confirmed_ = true;   // ... and every message the peer posted without an immediate has landed
  uint32_t busy_messages_ = 0;    // messages delivered since the last sleep (the flag is cleared after a few)
  uint64_t read_wr_ = 0;          // send-queue index of the READ of the peer's posted count (0: none)
  uint64_t read_completed_wr_ = 0;  // index of the last READ completed (its count is in *read_word_)
  uint64_t* read_word_ = nullptr;  // where the READ lands (after the staging slots, in send_mr_)
  bool hello_sent_ = false;       // our hello is posted
  bool hello_acked_ = false;      // our hello completed: the peer's QP is ready to receive (it called connect)
  bool closed_ = false;           // the endpoint is gone
  bool error_reported_ = false;   // poll() returned the error once (it then stops counting as activity)
  bool inline_target_sent_ = false;  // a kInline was posted; its target was {inline_address_, inline_rkey_}
  uint64_t inline_address_ = 0;
  uint32_t inline_rkey_ = 0;
  bool inline_target_seen_ = false;  // a kInline was received; its target was {inline_address_seen_, ..._seen_}
  uint64_t inline_address_seen_ = 0;
  uint32_t inline_rkey_seen_ = 0;
  uint32_t empty_polls_ = 0;      // poll() calls in a row that found nothing (endpoint thread only, no lock)

  std::atomic<uint64_t> next_seq_{1};    // consumed_ + 1 (written under mu_; poll() reads it without)
  std::atomic<size_t> inbox_size_{0};   // inbox_.size() (likewise)
  std::atomic<uint64_t> writes_posted_{0};
  std::atomic<uint64_t> writes_completed_{0};
  std::atomic<bool> connected_{false};  // QP in RTS
  std::atomic<bool> failed_{false};     // error_ is set
  std::atomic<bool> peer_gone_{false};  // the peer stopped acknowledging (IBV_WC_RETRY_EXC_ERR)
  std::atomic<bool> left_{false};       // left_status_ and left_after_ are set (the peer said goodbye)
  Status left_status_;                  // the error once the grace is over (written before left_)
  Clock::time_point left_after_;        // when it becomes the error (written before left_)
  mutable std::mutex error_mu_;
  Status error_;  // guarded by error_mu_
};

}  // namespace zw::transport::verbs
