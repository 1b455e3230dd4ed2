// VerbsConnection data path: posting writes and messages, polling the CQ, and returning credits.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

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
  wr->wr_id = (index << 3) | tag;
  if (signal) wr->send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  int err = ibv_post_send(qp_, wr, &bad);
  if (err != 0) return fail(system_error("ibv_post_send to " + peer_desc(), err), false);
  sq_posted_ = index;
  unsignaled_run_ = signal ? 0 : unsignaled_run_ + 1;
  return Status();
}

Status VerbsConnection::post_message(MsgType type, uint64_t notify, std::span<const std::byte> payload,
                                     uint64_t tag) {
  ZW_TRY(wait_for(&VerbsConnection::has_send_credit, "receive credits (a free receive buffer)"));
  ZW_TRY(wait_for(&VerbsConnection::sq_has_room, "send-queue space"));
  std::byte* slot = send_buf_.data() + (sq_posted_ % kSendDepth) * kSlotBytes;
  WireHeader header{type, 0, static_cast<uint16_t>(payload.size()), 0, notify};
  std::memcpy(slot, &header, kHeaderBytes);
  if (!payload.empty()) std::memcpy(slot + kHeaderBytes, payload.data(), payload.size());
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(slot);
  sge.length = static_cast<uint32_t>(kHeaderBytes + payload.size());
  sge.lkey = send_mr_->lkey;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = sge.length <= max_inline_ ? IBV_SEND_INLINE : 0;
  ZW_TRY(post_send_wr(&wr, tag));
  ++sends_posted_;
  return Status();
}

Status VerbsConnection::post_write(const VerbsMemoryRegion& local, size_t local_offset, const VerbsRemoteKey& key,
                                   size_t remote_offset, size_t bytes, uint64_t notify) {
  std::lock_guard<std::mutex> lock(mu_);
  ZW_TRY(error());
  if (!hello_sent_) ZW_TRY(send_hello_locked());
  writes_posted_.fetch_add(1, std::memory_order_acq_rel);
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
  return post_message(kNotify, notify, {}, kWriteEndBit);
}

Status VerbsConnection::post_control(std::span<const std::byte> payload) {
  std::lock_guard<std::mutex> lock(mu_);
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
    ZW_TRY(error());
    ZW_TRY(st);
    if ((this->*ready)()) return Status();
    if (deadline.expired()) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout_s);
      return fail(Status(Code::kTimeout, "timed out after " + std::string(secs) + " s waiting for " + what +
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
  if (!recv) sq_done_ = std::max(sq_done_, wc.wr_id >> 3);
  if (wc.status != IBV_WC_SUCCESS) {
    if (closed_ || (wc.status == IBV_WC_WR_FLUSH_ERR && failed_.load(std::memory_order_acquire))) return Status();
    return fail(completion_error(wc), wc.status == IBV_WC_RETRY_EXC_ERR);
  }
  if (recv) return handle_receive(wc);
  if (wc.wr_id & kWriteEndBit) writes_completed_.fetch_add(1, std::memory_order_acq_rel);
  if (wc.wr_id & kHelloBit) hello_acked_ = true;
  return Status();
}

Status VerbsConnection::handle_receive(const ibv_wc& wc) {
  uint64_t slot = wc.wr_id >> 3;
  auto malformed = [&](const std::string& why) {
    return fail(Status(Code::kProtocolError, "malformed verbs message from " + peer_desc() + ": " + why), false);
  };
  if (slot >= kRecvDepth || wc.byte_len < kHeaderBytes) return malformed(std::to_string(wc.byte_len) + " bytes");
  const std::byte* data = recv_buf_.data() + slot * kSlotBytes;
  WireHeader header;
  std::memcpy(&header, data, kHeaderBytes);
  if (header.type == kHello) {
    // Nothing to do: the peer's hello only needs our acknowledgement, which the QP sent.
  } else if (header.type == kNotify && !closed_) {
    Message& m = inbox_.emplace_back();
    m.kind = MessageKind::kNotify;
    m.notify = header.notify;
  } else if (header.type == kControl && !closed_) {
    if (header.size > Message::kMaxControl || wc.byte_len != kHeaderBytes + header.size)
      return malformed("control message of " + std::to_string(header.size) + " bytes in " +
                       std::to_string(wc.byte_len));
    Message& m = inbox_.emplace_back();
    m.kind = MessageKind::kControl;
    m.size = header.size;
    std::memcpy(m.data.data(), data + kHeaderBytes, header.size);
  } else if (header.type != kNotify && header.type != kControl) {
    return malformed("unknown type " + std::to_string(header.type));
  }
  ZW_TRY(post_recv(static_cast<uint32_t>(slot)));
  ++consumed_;
  return Status();
}

Status VerbsConnection::return_credits() {
  if (consumed_ - advertised_ < static_cast<uint64_t>(kCreditBatch) || closed_ || !sq_has_room() ||
      !connected_.load(std::memory_order_acquire) || failed_.load(std::memory_order_acquire))
    return Status();
  std::byte* slot = send_buf_.data() + (sq_posted_ % kSendDepth) * kSlotBytes;
  std::memcpy(slot, &consumed_, sizeof consumed_);
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(slot);
  sge.length = sizeof consumed_;
  sge.lkey = send_mr_->lkey;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = sge.length <= max_inline_ ? IBV_SEND_INLINE : 0;
  wr.wr.rdma.remote_addr = credit_target_.addr;
  wr.wr.rdma.rkey = credit_target_.rkey;
  ZW_TRY(post_send_wr(&wr, 0));
  advertised_ = consumed_;
  return Status();
}

Result<bool> VerbsConnection::poll(Message* out) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)progress_locked();  // a failure is recorded as the sticky error, returned once the inbox is empty
  if (!inbox_.empty()) {
    *out = inbox_.front();
    inbox_.pop_front();
    return true;
  }
  if (failed_.load(std::memory_order_acquire)) {
    error_reported_ = true;
    return error();
  }
  return false;
}

bool VerbsConnection::progress_and_check() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // the endpoint thread is busy with it
  (void)progress_locked();
  return !inbox_.empty() || (failed_.load(std::memory_order_acquire) && !error_reported_);
}

void VerbsConnection::arm() {
  std::lock_guard<std::mutex> lock(mu_);
  ibv_req_notify_cq(cq_, 0);
}

}  // namespace zw::transport::verbs
