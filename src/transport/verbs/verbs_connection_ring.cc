// VerbsConnection data path, receiving side: taking the peer's messages from our eager ring by reading its
// memory (see the wire protocol in verbs_connection.h), delivering them, and poll()/progress_and_check().
// Non-goals: posting (verbs_connection_io.cc), set-up (verbs_connection.cc).
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

#include "transport/verbs/verbs_connection.h"

namespace zw::transport::verbs {
namespace {

constexpr uint32_t kReapEvery = 16;          // messages taken from the ring between two CQ polls
constexpr uint32_t kBusyBeforeClear = 8;     // messages delivered without a sleep before the flag is cleared
// Empty poll() calls between two CQ polls: the CQ is only polled by the last of each run of them, so that the
// first polls after a write() (when the answer may come soon) stay quick. More than the polls of a typical 8-byte
// round trip's wait in the Soft-RoCE guest (~17), so that its answer rarely lands during a CQ poll; taking
// messages from the ring polls the CQ every kReapEvery messages anyway.
constexpr uint32_t kEmptyPollsPerCq = 64;
constexpr uint32_t kSpinBeforeYield = 256;  // empty polls before a software-device rank starts yielding
constexpr uint32_t kSpinBeforeNap = 4096;   // ... and before it naps instead (its vCPU/core goes idle)
constexpr auto kNap = std::chrono::microseconds(20);

// Frees a consumed slot (`used` bytes of header and body, then the check word) with word stores, not a memset
// call (the compiler would turn a plain loop back into one).
void zero_slot(std::byte* slot, size_t used) {
  for (size_t at = 0; at < used + kCheckBytes; at += 8)
    __atomic_store_n(reinterpret_cast<uint64_t*>(slot + at), 0, __ATOMIC_RELAXED);
}

}  // namespace

Status VerbsConnection::malformed(const std::string& why) {
  return fail(Status(Code::kProtocolError, "malformed verbs message from " + peer_desc() + ": " + why +
                                               "; do both ranks run the same zerowire version?"),
              false);
}

std::byte* VerbsConnection::peek_slot(WireHeader* header, size_t* used, bool* oversize) const {
  std::byte* slot = ring_ + (consumed_ % kRecvDepth) * kRingSlotBytes;
  const RingSlot state = peek_ring_slot(slot, consumed_ + 1, header, used);
  *oversize = state == RingSlot::kOversize;
  return state == RingSlot::kReady ? slot : nullptr;  // null: not all landed yet (or oversize)
}

void VerbsConnection::release_slot(std::byte* slot, size_t used) {
  zero_slot(slot, used);
  ++consumed_;
  next_seq_.store(consumed_ + 1, std::memory_order_release);
}

Result<bool> VerbsConnection::take_slot(Message* out, bool* part) {
  for (;;) {
    if (closed_) return false;
    const uint64_t seq = consumed_ + 1;
    WireHeader header;
    size_t used = 0;
    bool oversize = false;
    std::byte* slot = peek_slot(&header, &used, &oversize);
    if (oversize) return malformed("message " + std::to_string(seq) + " of " + std::to_string(header.size) + " bytes");
    if (slot == nullptr) return false;
    if ((header.flags & kAfterData) && imm_seen_ < seq) {
      ZW_TRY(progress_locked());
      if (imm_seen_ < seq) return false;  // its completion (and the data of its WRITEs) is not there yet
    }
    bool deliver = false;
    Status st = deliver_slot(header, slot + kHeaderBytes, out, part, &deliver);
    release_slot(slot, used);
    if (header.flags & kImm) ++imm_consumed_;
    ZW_TRY(st);
    if (++since_reap_ >= kReapEvery) {
      ZW_TRY(progress_locked());
    } else if (consumed_ - advertised_ >= static_cast<uint64_t>(kCreditBatch)) {
      ZW_TRY(return_credits());
    }
    if (deliver) return true;
  }
}

bool VerbsConnection::take_common(Message* out) {
  // Only a message that needs nothing but the copy: no immediate (a receive to account for), not kAfterData (a
  // completion to wait for), and no CQ poll or credit return due after it; a sleeping or busy-counting receiver
  // (sleep_flag_) takes the general path.
  if (sleep_flag_ || closed_ || !inline_target_seen_ || since_reap_ + 1 >= kReapEvery ||
      consumed_ + 1 - advertised_ >= static_cast<uint64_t>(kCreditBatch) || !registry_)
    return false;
  WireHeader header;
  size_t used = 0;
  bool oversize = false;
  std::byte* slot = peek_slot(&header, &used, &oversize);
  if (slot == nullptr || header.type != kInline || header.flags != kSameTarget) return false;
  // A target outside every live registration is left to take_slot(), which fails the connection.
  if (!registry_->copy_in(inline_rkey_seen_, inline_address_seen_, slot + kHeaderBytes, header.size, &inline_hint_))
    return false;
  release_slot(slot, used);
  ++since_reap_;
  out->kind = MessageKind::kNotify;
  out->size = 0;
  out->notify = header.notify;
  return true;
}

Status VerbsConnection::deliver_slot(const WireHeader& header, const std::byte* body, Message* out, bool* part,
                                     bool* deliver) {
  *part = false;
  *deliver = true;
  RingBody b;
  if (Status st = decode_ring_body(header, body, inline_target_seen_, &b); !st.ok()) return malformed(st.message());
  switch (header.type) {
    case kHello:  // nothing to do: the peer only needed our QP's acknowledgement
      *deliver = false;
      return Status();
    case kNotify:
    case kPart:
      *part = header.type == kPart;
      out->kind = MessageKind::kNotify;
      out->size = 0;
      out->notify = header.notify;
      return Status();
    case kControl:
      out->kind = MessageKind::kControl;
      out->size = static_cast<uint32_t>(b.size);
      out->notify = 0;
      std::memcpy(out->data.data(), b.data, b.size);
      return Status();
    default:  // kInline (decode_ring_body refused every other type)
      if (b.has_target) {
        inline_address_seen_ = b.address;
        inline_rkey_seen_ = b.rkey;
        inline_target_seen_ = true;
      }
      return receive_inline(b.data, b.size, header.notify, out);
  }
}

Status VerbsConnection::receive_inline(const std::byte* data, size_t bytes, uint64_t notify, Message* out) {
  const uint64_t address = inline_address_seen_;
  const uint32_t rkey = inline_rkey_seen_;
  if (!registry_ || !registry_->copy_in(rkey, address, data, bytes, &inline_hint_)) {
    char where[64];
    std::snprintf(where, sizeof where, "%#llx", static_cast<unsigned long long>(address));
    return fail(Status(Code::kRemoteAccess, "rank " + std::to_string(peer_) + " wrote " + std::to_string(bytes) +
                                                " bytes to " + where + " (rkey " + std::to_string(rkey) +
                                                "), which is not inside a live registration of rank " +
                                                std::to_string(rank_) + ": the region was deregistered, or the "
                                                "remote key belongs to another rank or transport"),
                false);
  }
  out->kind = MessageKind::kNotify;
  out->size = 0;
  out->notify = notify;
  return Status();
}

Status VerbsConnection::drain_ring() {
  for (;;) {
    Inbound in;
    ZW_ASSIGN_OR_RETURN(bool got, take_slot(&in.msg, &in.part));
    if (!got) return Status();
    inbox_.push_back(in);
    inbox_size_.store(inbox_.size(), std::memory_order_release);
  }
}

Result<bool> VerbsConnection::poll(Message* out, bool* part) {
  if (nothing_arrived()) {
    ++empty_polls_;
  } else {
    std::lock_guard<ConnLock> lock(mu_);
    if (!inbox_.empty()) {
      *out = inbox_.front().msg;
      *part = inbox_.front().part;
      inbox_.pop_front();
      inbox_size_.store(inbox_.size(), std::memory_order_release);
      empty_polls_ = 0;
      return true;
    }
    if (inbox_.empty() && take_common(out)) {  // the common message, without the general path's layers
      *part = false;
      empty_polls_ = 0;
      return true;
    }
    // A failure is recorded as the sticky error, returned below once nothing is left to deliver.
    Result<bool> got = take_slot(out, part);
    if (got.ok() && *got) {
      empty_polls_ = 0;
      // kBusyBeforeClear messages without a sleep: the peer is busy and so are we, let it send plain WRITEs
      // (a failure is the sticky error, seen later).
      if (sleep_flag_ && ++busy_messages_ >= kBusyBeforeClear && hello_acked_ && sq_has_room() &&
          connected_.load(std::memory_order_acquire) && write_peer_word(kSleepWord, 0).ok()) {
        sleep_flag_ = false;
        sleep_confirmed_ = false;
        read_wr_ = 0;  // a READ still in flight counts messages from before the flag was cleared
      }
      return true;
    }
    if (got.ok() && empty_polls_ % kEmptyPollsPerCq == kEmptyPollsPerCq - 1) (void)progress_locked();
    if (Status st = error(); !st.ok()) {
      error_reported_ = true;
      return st;
    }
    ++empty_polls_;
  }
  // On a software device (Soft-RoCE, siw) the "NIC" is the host's CPUs: the packets this rank waits for are
  // processed by the sender's system calls and softirqs, maybe on this very CPU, and a busy-polling rank takes
  // that CPU (or, in a VM, the host core behind its vCPU) away from them. So: spin briefly (a reply that comes
  // soon is not delayed by a system call), then yield on every empty poll, and after a long idle streak nap
  // kNap per poll so that the CPU really goes idle (bench/softroce/run.sh: 0.4-0.7 -> 0.93 of perftest's
  // bandwidth). Hardware devices never yield or nap here.
  if (device_->software() && empty_polls_ > kSpinBeforeYield) {
    if (empty_polls_ > kSpinBeforeNap) {
      std::this_thread::sleep_for(kNap);
    } else {
      std::this_thread::yield();
    }
  }
  return false;
}

bool VerbsConnection::nothing_arrived() const {
  // Every kEmptyPollsPerCq-th empty poll takes the lock to poll the CQ; so does one with an error to report.
  if (empty_polls_ % kEmptyPollsPerCq == kEmptyPollsPerCq - 1 || failed_.load(std::memory_order_acquire) ||
      left_.load(std::memory_order_acquire) || inbox_size_.load(std::memory_order_acquire) != 0)
    return false;
  const uint64_t seq = next_seq_.load(std::memory_order_acquire);
  const std::byte* slot = ring_ + ((seq - 1) % kRecvDepth) * kRingSlotBytes;
  const uint32_t seq32 = __atomic_load_n(reinterpret_cast<const uint32_t*>(slot + offsetof(WireHeader, seq32)),
                                         __ATOMIC_ACQUIRE);
  return seq32 != static_cast<uint32_t>(seq);
}

void VerbsConnection::begin_sleep() {
  std::lock_guard<ConnLock> lock(mu_);
  if (sleep_confirmed_ || read_wr_ != 0 || closed_ || failed_.load(std::memory_order_acquire)) return;
  if (kSendDepth - (sq_posted_ - sq_done_) < 2) return;  // no room for the flag and the READ: finish_sleep() retries
  if (!sleep_flag_) {
    if (!write_peer_word(kSleepWord, 1).ok()) return;
    sleep_flag_ = true;
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(read_word_);
  sge.length = sizeof(uint64_t);
  sge.lkey = send_mr_->lkey;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = credit_target_.addr + kPostedWord * sizeof(uint64_t);
  wr.wr.rdma.rkey = credit_target_.rkey;
  if (post_send_wr(&wr, kReadBit).ok()) read_wr_ = sq_posted_;
}

bool VerbsConnection::finish_sleep(Deadline deadline) {
  std::unique_lock<ConnLock> lock(mu_);
  busy_messages_ = 0;
  while (!sleep_confirmed_) {
    if (left_.load(std::memory_order_acquire)) return true;  // it said goodbye: nothing more will come
    if (!progress_locked().ok() || !drain_ring().ok() || !inbox_.empty() || closed_) return false;
    if (read_wr_ != 0 && read_completed_wr_ == read_wr_ && consumed_ >= *read_word_) {
      // Every message the peer posted before it could see our flag has landed: later ones carry immediates.
      sleep_confirmed_ = true;
      read_wr_ = 0;
      break;
    }
    if (deadline.expired()) return false;
    lock.unlock();
    std::this_thread::yield();
    begin_sleep();  // when it could not post before
    lock.lock();
  }
  return true;
}

bool VerbsConnection::progress_and_check() {
  std::unique_lock<ConnLock> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // the endpoint thread is busy with it
  Status st = progress_locked();
  if (st.ok()) (void)drain_ring();  // a failure is the sticky error, reported below
  return !inbox_.empty() || (!error_reported_ && !error().ok());
}

}  // namespace zw::transport::verbs
