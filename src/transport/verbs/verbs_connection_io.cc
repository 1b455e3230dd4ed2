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
constexpr uint32_t kSpinBeforeYield = 256;  // empty polls before a software-device rank starts yielding
constexpr uint32_t kSpinBeforeNap = 4096;   // ... and before it naps instead (its vCPU/core goes idle)
constexpr auto kNap = std::chrono::microseconds(20);

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
                                     uint64_t tag, std::span<const std::byte> prefix) {
  ZW_TRY(wait_for(&VerbsConnection::has_send_credit, "receive credits (a free receive buffer)"));
  ZW_TRY(wait_for(&VerbsConnection::sq_has_room, "send-queue space"));
  std::byte* slot = send_buf_.data() + (sq_posted_ % kSendDepth) * kSlotBytes;
  const size_t body = prefix.size() + payload.size();
  WireHeader header{type, 0, static_cast<uint16_t>(body), 0, notify};
  std::memcpy(slot, &header, kHeaderBytes);
  if (!prefix.empty()) std::memcpy(slot + kHeaderBytes, prefix.data(), prefix.size());
  if (!payload.empty()) std::memcpy(slot + kHeaderBytes + prefix.size(), payload.data(), payload.size());
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(slot);
  sge.length = static_cast<uint32_t>(kHeaderBytes + body);
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
                                   size_t remote_offset, size_t bytes, uint64_t notify, bool part) {
  std::lock_guard<std::mutex> lock(mu_);
  ZW_TRY(error());
  if (!hello_sent_) ZW_TRY(send_hello_locked());
  writes_posted_.fetch_add(1, std::memory_order_acq_rel);
  if (!part && bytes > 0 && bytes <= kMaxInlineWrite && !key.device && local.mem().kind == MemKind::kHost) {
    std::byte target[kInlineTargetBytes] = {};
    const uint64_t address = key.address + remote_offset;
    std::memcpy(target, &address, 8);
    std::memcpy(target + 8, &key.rkey, 4);
    return post_message(kInline, notify, {local.mem().data() + local_offset, bytes}, kWriteEndBit, target);
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
  return post_message(part ? kPart : kNotify, notify, {}, kWriteEndBit);
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
    for (VerbsConnection* s : siblings_) (void)s->progress_and_check();
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
  } else if ((header.type == kNotify || header.type == kPart) && !closed_) {
    Inbound& in = inbox_.emplace_back();
    in.part = header.type == kPart;
    in.msg.kind = MessageKind::kNotify;
    in.msg.notify = header.notify;
  } else if (header.type == kControl && !closed_) {
    if (header.size > Message::kMaxControl || wc.byte_len != kHeaderBytes + header.size)
      return malformed("control message of " + std::to_string(header.size) + " bytes in " +
                       std::to_string(wc.byte_len));
    Inbound& in = inbox_.emplace_back();
    in.part = false;
    Message& m = in.msg;
    m.kind = MessageKind::kControl;
    m.size = header.size;
    std::memcpy(m.data.data(), data + kHeaderBytes, header.size);
  } else if (header.type == kInline && !closed_) {
    if (header.size < kInlineTargetBytes || wc.byte_len != kHeaderBytes + header.size)
      return malformed("inline write of " + std::to_string(header.size) + " bytes in " + std::to_string(wc.byte_len));
    ZW_TRY(receive_inline(data + kHeaderBytes, header.size, header.notify));
  } else if (header.type != kNotify && header.type != kControl && header.type != kPart && header.type != kInline) {
    return malformed("unknown type " + std::to_string(header.type));
  }
  ZW_TRY(post_recv(static_cast<uint32_t>(slot)));
  ++consumed_;
  return Status();
}

Status VerbsConnection::receive_inline(const std::byte* data, size_t size, uint64_t notify) {
  uint64_t address = 0;
  uint32_t rkey = 0;
  std::memcpy(&address, data, 8);
  std::memcpy(&rkey, data + 8, 4);
  const size_t bytes = size - kInlineTargetBytes;
  if (!registry_ || !registry_->copy_in(rkey, address, data + kInlineTargetBytes, bytes)) {
    char where[64];
    std::snprintf(where, sizeof where, "%#llx", static_cast<unsigned long long>(address));
    return fail(Status(Code::kRemoteAccess, "rank " + std::to_string(peer_) + " wrote " + std::to_string(bytes) +
                                                " bytes to " + where + " (rkey " + std::to_string(rkey) +
                                                "), which is not inside a live registration of rank " +
                                                std::to_string(rank_) + ": the region was deregistered, or the "
                                                "remote key belongs to another rank or transport"),
                false);
  }
  Inbound& in = inbox_.emplace_back();
  in.part = false;
  in.msg.kind = MessageKind::kNotify;
  in.msg.notify = notify;
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

Result<bool> VerbsConnection::poll(Message* out, bool* part) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    (void)progress_locked();  // a failure is recorded as the sticky error, returned once the inbox is empty
    if (!inbox_.empty()) {
      *out = inbox_.front().msg;
      *part = inbox_.front().part;
      inbox_.pop_front();
      empty_polls_ = 0;
      return true;
    }
    if (Status st = error(); !st.ok()) {
      error_reported_ = true;
      return st;
    }
  }
  // On a software device (Soft-RoCE, siw) the "NIC" is the host's CPUs: the packets this rank waits for are
  // processed by the sender's system calls and softirqs, maybe on this very CPU, and a busy-polling rank takes
  // that CPU (or, in a VM, the host core behind its vCPU) away from them. So: spin briefly (a reply that comes
  // soon is not delayed by a system call), then yield on every empty poll, and after a long idle streak nap
  // kNap per poll so that the CPU really goes idle (bench/softroce/run.sh: 0.4-0.7 -> 0.93 of perftest's
  // bandwidth). Hardware devices never yield or nap here.
  if (device_->software() && ++empty_polls_ > kSpinBeforeYield) {
    if (empty_polls_ > kSpinBeforeNap) {
      std::this_thread::sleep_for(kNap);
    } else {
      std::this_thread::yield();
    }
  }
  return false;
}

bool VerbsConnection::progress_and_check() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // the endpoint thread is busy with it
  (void)progress_locked();
  return !inbox_.empty() || (!error_reported_ && !error().ok());
}

void VerbsConnection::arm() {
  std::lock_guard<std::mutex> lock(mu_);
  ibv_req_notify_cq(cq_, 0);
}

}  // namespace zw::transport::verbs
