// VerbsConnection data path, sending side: posting writes and messages into the peer's ring, polling the CQ, and
// returning credits. The receiving side (taking messages from our ring) is verbs_connection_ring.cc.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "transport/verbs/verbs_connection.h"

namespace zw::transport::verbs {
namespace {

constexpr int kPollBatch = 16;        // completions taken per ibv_poll_cq
constexpr int kSpinsBeforeSleep = 200;

}  // namespace

Status VerbsConnection::post_send_wr(ibv_send_wr* wr, uint64_t tag) {
  bool signal = tag != 0 || unsignaled_run_ + 1 >= kSignalEvery;
  uint64_t index = sq_posted_ + 1;  // sq_done_ becomes this once the work request completed
  wr->wr_id = (index << kTagBits) | tag;
  if (signal) wr->send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  int err = ibv_post_send(qp_, wr, &bad);
  if (err != 0) return fail(system_error("ibv_post_send to " + peer_desc(), err), false);
  sq_posted_ = index;
  unsignaled_run_ = signal ? 0 : unsignaled_run_ + 1;
  return Status();
}

Status VerbsConnection::post_message(MsgType type, uint64_t notify, std::span<const std::byte> payload,
                                     uint64_t tag, std::span<const std::byte> prefix, uint8_t flags) {
  if (!has_send_credit())
    ZW_TRY(wait_for(&VerbsConnection::has_send_credit, "receive credits (a free slot of its ring)"));
  if (!sq_has_room()) ZW_TRY(wait_for(&VerbsConnection::sq_has_room, "send-queue space"));
  std::byte* slot = send_buf_.data() + (sq_posted_ % kSendDepth) * kRingSlotBytes;
  const size_t body = prefix.size() + payload.size();
  const uint64_t seq = sends_posted_ + 1;
  // The posted count, then the peer's sleep flag, with a store-load fence between (see "Wake-ups").
  __atomic_store_n(&ctl_[kPostedWord], seq, __ATOMIC_SEQ_CST);
  if ((flags & kAfterData) || __atomic_load_n(&ctl_[kSleepWord], __ATOMIC_SEQ_CST) != 0) flags |= kImm;
  const WireHeader header{type, flags, static_cast<uint16_t>(body), static_cast<uint32_t>(seq), notify};
  const size_t slot_bytes = encode_ring_slot(slot, header, seq, prefix, payload);
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(slot);
  sge.length = static_cast<uint32_t>(slot_bytes);
  sge.lkey = send_mr_->lkey;
  ibv_send_wr wr{};
  if (flags & kImm) {
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(static_cast<uint32_t>(seq));
  } else {
    wr.opcode = IBV_WR_RDMA_WRITE;
  }
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = sge.length <= max_inline_ ? IBV_SEND_INLINE : 0;
  wr.wr.rdma.remote_addr = credit_target_.ring_addr + ((seq - 1) % kRecvDepth) * kRingSlotBytes;
  wr.wr.rdma.rkey = credit_target_.rkey;
  ZW_TRY(post_send_wr(&wr, tag));
  sends_posted_ = seq;
  return Status();
}

Status VerbsConnection::post_write(const VerbsMemoryRegion& local, size_t local_offset, const VerbsRemoteKey& key,
                                   size_t remote_offset, size_t bytes, uint64_t notify, bool part) {
  std::lock_guard<ConnLock> lock(mu_);
  ZW_TRY(error());
  if (!hello_sent_) ZW_TRY(send_hello_locked());
  // No write pending: a write whose bytes travel in the message is complete once posted. (Both counters
  // change only under mu_, so plain stores publish them: no read-modify-write on the latency path.)
  const uint64_t posted = writes_posted_.load(std::memory_order_relaxed);
  const bool idle = writes_completed_.load(std::memory_order_relaxed) == posted;
  writes_posted_.store(posted + 1, std::memory_order_release);
  if (!part && bytes > 0 && bytes <= kMaxInlineWrite && !key.device && local.mem().kind == MemKind::kHost) {
    const uint64_t address = key.address + remote_offset;
    const std::span<const std::byte> payload{local.mem().data() + local_offset, bytes};
    const uint64_t tag = idle ? 0 : kWriteEndBit;
    if (inline_target_sent_ && inline_address_ == address && inline_rkey_ == key.rkey) {
      ZW_TRY(post_message(kInline, notify, payload, tag, {}, kSameTarget));  // 16 bytes fewer on the wire
    } else {
      std::byte target[kInlineTargetBytes] = {};
      std::memcpy(target, &address, 8);
      std::memcpy(target + 8, &key.rkey, 4);
      ZW_TRY(post_message(kInline, notify, payload, tag, target));
      inline_target_sent_ = true;
      inline_address_ = address;
      inline_rkey_ = key.rkey;
    }
    if (idle) writes_completed_.store(posted + 1, std::memory_order_release);
    return Status();
  }
  const size_t max_chunk = std::min<size_t>(device_->max_msg_size() ? device_->max_msg_size() : 1u << 30, 1u << 30);
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min(bytes - done, max_chunk);
    ZW_TRY(wait_for(&VerbsConnection::sq_has_room, "send-queue space"));
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(local.mem().data() + local_offset + done);
    sge.length = static_cast<uint32_t>(n);
    sge.lkey = local.lkey();
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = key.address + remote_offset + done;
    wr.wr.rdma.rkey = key.rkey;
    ZW_TRY(post_send_wr(&wr, 0));
    done += n;
  }
  return post_message(part ? kPart : kNotify, notify, {}, kWriteEndBit, {}, bytes > 0 ? kAfterData : 0);
}

Status VerbsConnection::post_control(std::span<const std::byte> payload) {
  std::lock_guard<ConnLock> lock(mu_);
  ZW_TRY(error());
  if (!hello_sent_) ZW_TRY(send_hello_locked());
  return post_message(kControl, 0, payload, 0);
}

Status VerbsConnection::wait_for(bool (VerbsConnection::*ready)() const, const char* what) {
  if ((this->*ready)()) return Status();
  const double timeout_s = knobs().timeout_s;
  const Deadline deadline = Deadline::after_seconds(timeout_s);
  for (int spins = 0;; ++spins) {
    Status st = progress_locked();
    if (st.ok()) st = drain_ring();  // the peer may be waiting for our credits too
    ZW_TRY(error());
    ZW_TRY(st);
    if ((this->*ready)()) return Status();
    for (VerbsConnection* s : siblings_) (void)s->progress_and_check();
    if (deadline.expired()) {
      return fail(Status(Code::kTimeout, "timed out after " + seconds_text(timeout_s) + " s waiting for " + what +
                                             " on the connection to " + peer_desc() +
                                             ": is that rank stuck or not polling its endpoint? (ZW_TIMEOUT)"),
                  false);
    }
    if (spins < kSpinsBeforeSleep) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

Status VerbsConnection::progress_locked() {
  ibv_wc wc[kPollBatch];
  Status first;
  since_reap_ = 0;
  for (;;) {
    int n = ibv_poll_cq(cq_, kPollBatch, wc);
    if (n < 0) return fail(Status(Code::kEndpointError, "ibv_poll_cq failed on the connection to " + peer_desc()), false);
    for (int i = 0; i < n; ++i) {
      Status st = handle_completion(wc[i]);
      if (first.ok() && !st.ok()) first = st;
    }
    if (n < kPollBatch) break;
  }
  if (first.ok()) first = return_credits();
  return first;
}

Status VerbsConnection::handle_completion(const ibv_wc& wc) {
  bool recv = (wc.wr_id & kRecvBit) != 0;
  if (!recv) sq_done_ = std::max(sq_done_, wc.wr_id >> kTagBits);
  if (wc.status != IBV_WC_SUCCESS) {
    if (closed_ || (wc.status == IBV_WC_WR_FLUSH_ERR && failed_.load(std::memory_order_acquire))) return Status();
    // A sleep READ towards a peer that said goodbye: it left in order, which its "left" error reports.
    if ((wc.wr_id & kReadBit) && left_.load(std::memory_order_acquire)) return Status();
    return fail(completion_error(wc), wc.status == IBV_WC_RETRY_EXC_ERR);
  }
  if (recv) {
    ++recvs_reaped_;  // receives complete in order, one per kImm message of the peer
    // The immediate is the low 32 bits of the message's sequence number, which lies within a few rings of
    // consumed_ (the peer stays within its credits; completions are reaped every kReapEvery messages).
    const uint32_t imm = ntohl(wc.imm_data);
    const uint64_t seq = consumed_ + static_cast<uint64_t>(static_cast<int64_t>(
                                         static_cast<int32_t>(imm - static_cast<uint32_t>(consumed_))));
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || seq <= imm_seen_ || seq > consumed_ + kRecvDepth)
      return malformed("receive completion " + std::to_string(recvs_reaped_) + " has opcode " +
                       std::to_string(wc.opcode) + " and immediate " + std::to_string(imm) + " after message " +
                       std::to_string(imm_seen_) + " (" + std::to_string(consumed_) + " consumed)");
    imm_seen_ = seq;
    return Status();
  }
  if (wc.wr_id & kWriteEndBit)
    writes_completed_.store(writes_completed_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  if (wc.wr_id & kHelloBit) hello_acked_ = true;
  if (wc.wr_id & kReadBit) read_completed_wr_ = wc.wr_id >> kTagBits;
  return Status();
}

Status VerbsConnection::return_credits() {
  // Every consumed slot is free; so is every receive reaped (re-posted below). Credits go back once every
  // consumed kImm message's receive completion was reaped, so the peer never has more kImm messages in flight
  // than receives posted.
  if (consumed_ - advertised_ < static_cast<uint64_t>(kCreditBatch) || imm_consumed_ > recvs_reaped_ || closed_ ||
      !sq_has_room() || !connected_.load(std::memory_order_acquire) || failed_.load(std::memory_order_acquire))
    return Status();
  ZW_TRY(post_recvs(recvs_reaped_ - recvs_reposted_));
  recvs_reposted_ = recvs_reaped_;
  ZW_TRY(write_peer_word(kCreditWord, consumed_));
  advertised_ = consumed_;
  return Status();
}

Status VerbsConnection::write_peer_word(size_t word, uint64_t value) {
  std::byte* slot = send_buf_.data() + (sq_posted_ % kSendDepth) * kRingSlotBytes;
  std::memcpy(slot, &value, sizeof value);
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(slot);
  sge.length = sizeof value;
  sge.lkey = send_mr_->lkey;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = sge.length <= max_inline_ ? IBV_SEND_INLINE : 0;
  wr.wr.rdma.remote_addr = credit_target_.addr + word * sizeof(uint64_t);
  wr.wr.rdma.rkey = credit_target_.rkey;
  return post_send_wr(&wr, 0);
}

void VerbsConnection::arm() {
  std::lock_guard<ConnLock> lock(mu_);
  ibv_req_notify_cq(cq_, 0);
}

}  // namespace zw::transport::verbs
