// One RC connection to one peer: the QP, its CQ, the ring of posted receives, the staging ring of the send
// queue, and the flow control that keeps the peer's receive queue from ever running dry (no RNR).
//
// Wire protocol (all on the one RC QP, so RC ordering holds between every item):
//   - write(): RDMA WRITE(s) of the payload (unsignaled), then a SEND of a 16-byte header {kNotify, notify}
//     (signaled, wr_id marks the end of a write). The responder places the WRITE's data before it completes
//     the later SEND, so the peer's Notify always follows its data. This carries the full 64-bit notify value,
//     which WRITE_WITH_IMM's 32-bit immediate cannot.
//   - write() of at most kMaxInlineWrite bytes from host memory into host memory: one SEND of {kInline, size,
//     notify} + {address, rkey} + the bytes (one packet instead of WRITE + SEND); the receiver copies them into
//     place, after checking that the range lies in a live registration of its own with that rkey (the
//     registration cache), and then delivers the Notify.
//   - send(): a SEND of {kControl, size} + payload (inline when it fits max_inline_data).
//   - a part of a write striped over several QPs (ZW_IB_QPS_PER_CONNECTION > 1, see verbs_endpoint.h): the same
//     WRITE(s) followed by a {kPart, notify} SEND, which poll() hands to the endpoint flagged as a part.
//   - wait_connected(): a signaled SEND of {kHello}; its successful completion means the peer's QP acknowledged
//     it, i.e. the peer called connect() (its QP is in RTR; with rdma_cm, the CM exchange is over on both
//     sides). Until then the QP retransmits the hello every ack timeout (4.096 us * 2^ZW_IB_TIMEOUT), so a peer
//     that connects late delays the pair by up to one timeout.
// Flow control: the receiver keeps kRecvDepth receives posted and re-posts each buffer as soon as it has
// copied the message out. The sender counts SENDs posted; the receiver counts SENDs consumed and RDMA-writes
// that cumulative count into the sender's credit word (registered memory published in the address) every
// kCreditBatch messages. A SEND is posted only while posted - consumed_seen < kRecvDepth. Credit updates are
// RDMA WRITEs, which consume no receive, so returning credits never needs credits (no deadlock) and both
// ranks may flood each other: a sender waiting for credits keeps consuming (and crediting) its own inbound.
// Selective signalling: only a write's notify SEND and every kSignalEvery-th other WR are signaled; a signaled
// completion retires every earlier WR of the send queue (RC completes in order).
//
// Threading: mu_ guards the QP's posting side, the CQ and every counter; the endpoint thread and
// wait_for_activity() (any thread) take it. fail() may be called from the async-event thread.
// Non-goals: striping (the endpoint splits writes over its connections), reconnecting after an error, SRQ.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
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

namespace zw::transport::verbs {

// The receive window covers a full tx depth of 128 writes (one notify SEND each) so that a sender is not held
// up by a receiver that polls late; the send queue holds their WRITE + SEND pairs.
inline constexpr int kRecvDepth = 256;                // receives posted per connection (the peer's send window)
inline constexpr int kCreditBatch = kRecvDepth / 4;   // consumed messages per credit update
inline constexpr int kSendDepth = 512;                // send-queue work requests
inline constexpr int kSignalEvery = 64;               // longest run of unsignaled work requests
inline constexpr size_t kHeaderBytes = 16;            // WireHeader
inline constexpr size_t kSlotBytes = kHeaderBytes + Message::kMaxControl;  // one receive / staging buffer
inline constexpr size_t kInlineTargetBytes = 16;  // {address, rkey, reserved} after the header of a kInline
inline constexpr size_t kMaxInlineWrite = kSlotBytes - kHeaderBytes - kInlineTargetBytes;  // 224 bytes
inline constexpr double kLeftGrace = 2.0;  // seconds between a peer's goodbye and its "left" error

// Where the peer's credit word for us lives.
struct CreditTarget {
  uint64_t addr = 0;  // remote address of the 8-byte slot
  uint32_t rkey = 0;  // its rkey
};

class VerbsConnection {
 public:
  // Creates the CQ and the QP (moved to INIT) and posts the receive ring; `credit_word` is this rank's slot
  // that the peer RDMA-writes its consumed count into.
  // `registry` (the transport's registration cache) validates the targets of inline writes from the peer.
  static Result<std::shared_ptr<VerbsConnection>> create(std::shared_ptr<VerbsDevice> device, int rank, int peer,
                                                         uint32_t psn, const volatile uint64_t* credit_word,
                                                         const VerbsConfig& config,
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
  Status error() const;
  // The endpoint is gone: stop the QP (its work requests flush) and drop queued messages.
  void close();

  // --- any thread ---
  // Polls the CQ; true when a message or a not-yet-reported error is waiting for poll().
  bool progress_and_check();
  // Asks for a completion event on the channel for the next completion.
  void arm();
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
  struct WireHeader {
    uint8_t type;       // MsgType
    uint8_t reserved0;  // zero
    uint16_t size;      // control payload bytes
    uint32_t reserved1; // zero
    uint64_t notify;    // notify value (kNotify)
  };
  static_assert(sizeof(WireHeader) == kHeaderBytes);
  enum MsgType : uint8_t { kHello = 1, kNotify = 2, kControl = 3, kPart = 4, kInline = 5 };
  struct Inbound {
    Message msg;  // what poll() returns
    bool part;    // a kPart message (msg.kind is kNotify)
  };
  // wr_id layout: work-request index (send queue) or slot (receives) << 3 | these bits.
  static constexpr uint64_t kWriteEndBit = 1;  // the signaled last work request of a write()
  static constexpr uint64_t kRecvBit = 2;      // a receive
  static constexpr uint64_t kHelloBit = 4;     // the hello

  VerbsConnection(std::shared_ptr<VerbsDevice> device, int rank, int peer, uint32_t psn,
                  const volatile uint64_t* credit_word, const VerbsConfig& config,
                  std::shared_ptr<const VerbsRegCache> registry);
  Status receive_inline(const std::byte* data, size_t size, uint64_t notify);
  Status create_queues();
  Status post_recv(uint32_t slot);
  Status modify_to_init();
  // Everything below runs with mu_ held.
  Status progress_locked();
  Status handle_completion(const ibv_wc& wc);
  Status handle_receive(const ibv_wc& wc);
  Status completion_error(const ibv_wc& wc) const;
  // `tag` (kWriteEndBit, kHelloBit or 0) goes into the wr_id; a tagged work request is always signaled.
  Status post_send_wr(ibv_send_wr* wr, uint64_t tag);
  // The slot holds the header, then `prefix`, then `payload` (header.size counts both).
  Status post_message(MsgType type, uint64_t notify, std::span<const std::byte> payload, uint64_t tag,
                      std::span<const std::byte> prefix = {});
  Status wait_for(bool (VerbsConnection::*ready)() const, const char* what);
  bool sq_has_room() const { return sq_posted_ - sq_done_ < static_cast<uint64_t>(kSendDepth); }
  bool has_send_credit() const { return sends_posted_ - *credit_word_ < static_cast<uint64_t>(kRecvDepth); }
  Status return_credits();
  Status send_hello_locked();
  std::string peer_desc() const;

  const std::shared_ptr<VerbsDevice> device_;
  const int rank_;
  const int peer_;
  const uint32_t psn_;
  const volatile uint64_t* const credit_word_;  // written by the peer's NIC: its consumed count of our SENDs
  const VerbsConfig config_;
  const std::shared_ptr<const VerbsRegCache> registry_;  // validates inline-write targets (may be null)
  std::string peer_host_;  // from the peer's address (error messages)
  std::vector<VerbsConnection*> siblings_;  // the peer's other QPs (same owners, same lifetime)

  ibv_cq* cq_ = nullptr;             // owned; send and receive completions
  ibv_qp* qp_ = nullptr;             // owned
  std::vector<std::byte> recv_buf_;  // kRecvDepth slots
  std::vector<std::byte> send_buf_;  // kSendDepth staging slots, by send-queue index
  ibv_mr* recv_mr_ = nullptr;        // owned
  ibv_mr* send_mr_ = nullptr;        // owned
  uint32_t max_inline_ = 0;          // what the QP accepted
  CreditTarget credit_target_;       // where our consumed count goes

  mutable std::mutex mu_;
  std::deque<Inbound> inbox_;     // received, not yet polled
  uint64_t sq_posted_ = 0;        // send-queue work requests posted
  uint64_t sq_done_ = 0;          // ... known complete
  int unsignaled_run_ = 0;        // unsignaled work requests since the last signaled one
  uint64_t sends_posted_ = 0;     // SENDs posted (each takes one of the peer's receives)
  uint64_t consumed_ = 0;         // peer SENDs consumed and re-posted
  uint64_t advertised_ = 0;       // consumed_ last written to the peer's credit word
  bool hello_sent_ = false;       // our hello is posted
  bool hello_acked_ = false;      // our hello completed: the peer's QP is ready to receive (it called connect)
  bool closed_ = false;           // the endpoint is gone
  bool error_reported_ = false;   // poll() returned the error once (it then stops counting as activity)
  uint32_t empty_polls_ = 0;      // poll() calls in a row that found nothing (software devices then yield)

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
