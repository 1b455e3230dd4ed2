// ShmEndpoint: connection set-up, writes (memcpy into mapped arenas, else process_vm_writev), and the rings.
#include "transport/shm/shm_endpoint.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/helper_pool.h"
#include "common/knobs.h"
#include "common/log.h"
#include "transport/shm/shm_memory_region.h"

namespace zw::transport {
namespace {

constexpr uint64_t kLivenessCheckNs = 10'000'000;  // how often a waiting endpoint checks the peer's pid
constexpr size_t kInlineWriteLimit = 4096;  // larger writes go through a mapped arena or process_vm_writev
constexpr int kMaxSleepUs = 100;                   // longest sleep between polls of a waiting endpoint

std::string hex(uint64_t value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

// Sleeps `*sleep_us` (capped by the deadline) and doubles it up to kMaxSleepUs.
void back_off(int* sleep_us, Deadline deadline) {
  auto pause = std::min<std::chrono::nanoseconds>(std::chrono::microseconds(*sleep_us), deadline.remaining());
  std::this_thread::sleep_for(pause);
  *sleep_us = std::min(*sleep_us * 2, kMaxSleepUs);
}

}  // namespace

ShmEndpoint::ShmEndpoint(int rank, ShmAddress peer_address, std::shared_ptr<ShmSegment> own)
    : Endpoint(peer_address.rank),
      rank_(rank),
      peer_address_(std::move(peer_address)),
      own_(std::move(own)),
      in_(own_->control(peer()), own_->slots(peer())) {}

ShmEndpoint::~ShmEndpoint() { own_->backlog().fetch_sub(static_cast<int64_t>(backlog_.size())); }

std::string ShmEndpoint::peer_desc() const {
  return "rank " + std::to_string(peer()) + " (pid " + std::to_string(peer_address_.pid) + " on host " +
         peer_address_.host.hostname + ")";
}

Status ShmEndpoint::fail(Status status) {
  if (error_.ok()) {
    error_ = status;
    ZW_WARN(kShm, "endpoint to rank %d failed: %s", peer(), status.message().c_str());
  }
  return status;
}

Status ShmEndpoint::try_attach() {
  if (out_.valid()) return Status();
  auto segment = ShmSegment::open(peer_address_.segment, peer(), peer_address_.pid, own_->world_size());
  if (!segment.ok()) {
    if (segment.status().code() == Code::kNotFound) return Status();
    return fail(segment.status().with_context("cannot attach to " + peer_desc()));
  }
  peer_segment_ = std::move(segment).value();
  peer_segment_->mark_attached(rank_, static_cast<int32_t>(::getpid()));
  out_ = ShmRingProducer(peer_segment_->control(rank_), peer_segment_->slots(rank_));
  return Status();
}

Status ShmEndpoint::wait_connected(Deadline deadline) {
  ZW_TRY(error_);
  int sleep_us = 20;
  while (!connected_) {
    ZW_TRY(try_attach());
    if (out_.valid() && own_->attached(peer())) {
      connected_ = true;
      own_->unlink_if_all_attached();
      break;
    }
    std::string why;
    if (process_exited(peer_address_, &why))
      return fail(Status(Code::kConnectionFailed,
                         "rank " + std::to_string(peer()) + " exited before connecting over shm: " + why));
    if (deadline.expired()) {
      std::string state =
          out_.valid() ? "it has not attached to our segment " + own_->name() +
                             " yet; did it call connect() for rank " + std::to_string(rank_) + "?"
                       : "its segment " + peer_address_.segment + " does not exist; is that rank running this job?";
      return Status(Code::kTimeout, "timed out waiting for " + peer_desc() + " to connect over shm: " + state);
    }
    back_off(&sleep_us, deadline);
  }
  return Status();
}

Status ShmEndpoint::ensure_producer(const char* what) {
  ZW_TRY(try_attach());
  if (out_.valid()) return Status();
  return Status(Code::kInvalidArgument, std::string(what) + " rank " + std::to_string(peer()) +
                                            " before its shm segment exists: call wait_connected() first");
}

Status ShmEndpoint::write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
                          size_t remote_offset, size_t bytes, uint64_t notify) {
  ZW_TRY(error_);
  ZW_TRY(ensure_producer("write to"));
  auto where = [this] { return "write to rank " + std::to_string(peer()) + ": "; };  // built only on errors
  const MemRef& src = local.mem();
  if (src.kind != MemKind::kHost)
    return Status(Code::kUnsupported, where() + "the local region is " + mem_kind_name(src.kind) +
                                          " memory; the shm transport copies host memory only");
  if (local_offset > src.bytes || bytes > src.bytes - local_offset)
    return Status(Code::kInvalidArgument, where() + "local offset " + std::to_string(local_offset) + " + " +
                                              std::to_string(bytes) + " bytes exceeds the local region of " +
                                              std::to_string(src.bytes) + " bytes");
  auto key = ShmRemoteKey::parse(remote_key);
  if (!key.ok()) return key.status().with_context("write to rank " + std::to_string(peer())).at(__FILE__, __LINE__);
  if (remote_offset > key->length || bytes > key->length - remote_offset)
    return Status(Code::kRemoteAccess, where() + "remote offset " + std::to_string(remote_offset) + " + " +
                                           std::to_string(bytes) + " bytes exceeds the remote region of " +
                                           std::to_string(key->length) + " bytes");
  if (key->pid != peer_address_.pid)
    return Status(Code::kInvalidArgument, where() + "the remote key belongs to pid " + std::to_string(key->pid) +
                                              " but " + peer_desc() +
                                              " is another process: was it another rank's key?");
  ++writes_posted_;
  // Into a mapped arena (zw::mem_alloc memory, an eager inbox, a scratch slot): one copy, published to the peer by
  // push()'s release store of the ring tail, which the peer's poll() reads with acquire before it reports the
  // notify. Writes that fit one ring slot stay inline: one message either way.
  if (std::byte* arena = bytes > kInlineWriteMax && key->has_arena() ? mapped_target(*key) : nullptr) {
    std::byte* to = arena + key->arena_offset + remote_offset;
    const std::byte* from = src.data() + local_offset;
    // A large write is shared with the helper threads (ZW_HOST_THREADS): each part fences its own streaming stores
    // before it counts itself done, which this thread waits for before push() publishes the notify.
    internal::HelperPool::instance().split(bytes, 64, internal::HelperPool::Job::kMapped,
                                           [&](size_t o, size_t n) { copy_into_arena(to + o, from + o, n); });
    ++mapped_writes_;
  } else if (bytes > 0 && bytes <= kInlineWriteLimit) {
    // Small writes travel inside ring slots (up to kInlineWriteMax bytes each, the last one with the notify)
    // and the owner copies them into place as it pops them, before it sees the notify: no process_vm_writev
    // system call (1.66 µs for an 8-byte write, against UCX's 0.16).
    const std::byte* from = src.data() + local_offset;
    uint64_t address = key->address + remote_offset;
    std::array<std::byte, Message::kMaxControl> slot;
    for (size_t done = 0; done < bytes;) {
      size_t part = std::min(kInlineWriteMax, bytes - done);
      uint64_t at = address + done;
      std::memcpy(slot.data(), &at, sizeof at);
      std::memcpy(slot.data() + sizeof at, from + done, part);
      done += part;
      bool last = done == bytes;
      ZW_TRY(push(last ? kInlineWriteKind : kInlinePartKind, last ? notify : 0,
                  std::span<const std::byte>(slot.data(), sizeof at + part)));
    }
    ++writes_completed_;
    return Status();
  } else if (bytes > 0) {
    ZW_TRY(copy_to_peer(src.data() + local_offset, key->address + remote_offset, bytes, key->pid));
  }
  ++writes_completed_;
  return push(MessageKind::kNotify, notify, {});
}

std::byte* ShmEndpoint::mapped_target(const ShmRemoteKey& key) {
  std::string why;
  std::byte* base = arenas_.map(key, &why);
  if (base == nullptr && !why.empty()) {
    if (!warned_unmappable_)
      ZW_WARN(kShm, "cannot map arena %llu of %s (%s): writes into it use process_vm_writev instead",
              static_cast<unsigned long long>(key.arena_id), peer_desc().c_str(), why.c_str());
    else
      ZW_INFO(kShm, "cannot map arena %llu of %s (%s): using process_vm_writev",
              static_cast<unsigned long long>(key.arena_id), peer_desc().c_str(), why.c_str());
    warned_unmappable_ = true;
  }
  return base;
}

// Ranks that are threads of one process go through process_vm_writev too: a peer that already tore down its
// communicator has unmapped (or fenced) its buffers, and the syscall reports EFAULT where a memcpy would crash.
Status ShmEndpoint::copy_to_peer(const std::byte* src, uint64_t dst, size_t bytes, int32_t pid) {
  // A large copy is shared with the helper threads (ZW_HOST_THREADS); the first failure is reported.
  using internal::HelperPool;
  std::mutex mutex;
  Status first;
  HelperPool::instance().split(bytes, 4096, HelperPool::Job::kVmWrite, [&](size_t o, size_t n) {
    Status s = copy_to_peer_part(src + o, dst + o, n, pid);
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mutex);
    if (first.ok()) first = std::move(s);
  });
  return first.ok() ? first : fail(first);
}

Status ShmEndpoint::copy_to_peer_part(const std::byte* src, uint64_t dst, size_t bytes, int32_t pid) const {
  size_t done = 0;
  while (done < bytes) {
    iovec local{const_cast<std::byte*>(src) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(dst + done), bytes - done};  // NOLINT(performance-no-int-to-ptr)
    ssize_t n = ::process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return copy_error(n < 0 ? errno : EFAULT, dst + done, bytes - done);
  }
  return Status();
}

Status ShmEndpoint::copy_error(int err, uint64_t dst, size_t bytes) const {
  std::string range = "[";  // appended piecewise: gcc 12's -Wrestrict misfires on "literal" + std::string chains
  range += hex(dst);
  range += ", +" + std::to_string(bytes) + ")";
  switch (err) {
    case ESRCH:
      return Status(Code::kConnectionLost, peer_desc() + " exited: cannot write into its memory");
    case EPERM:
      return Status(Code::kRemoteAccess, "not permitted to write into the memory of " + peer_desc() +
                                             ": process_vm_writev needs the same user and ptrace permission "
                                             "(see /proc/sys/kernel/yama/ptrace_scope; containers may need "
                                             "CAP_SYS_PTRACE); use the tcp transport otherwise");
    case EFAULT:
      return Status(Code::kRemoteAccess, "write to " + peer_desc() + " faulted at " + range +
                                             ": the remote region is not mapped there any more (freed before "
                                             "deregistration?) or the local source is unreadable");
    default:
      return system_error("write of " + std::to_string(bytes) + " bytes to " + peer_desc() + " at " + range, err);
  }
}

Status ShmEndpoint::send(std::span<const std::byte> payload) {
  ZW_TRY(error_);
  if (payload.size() > Message::kMaxControl)
    return Status(Code::kInvalidArgument, "control message to rank " + std::to_string(peer()) + " has " +
                                              std::to_string(payload.size()) +
                                              " bytes; the shm transport carries at most " +
                                              std::to_string(Message::kMaxControl) + " (Caps::max_control_bytes)");
  ZW_TRY(ensure_producer("send to"));
  return push(MessageKind::kControl, 0, payload);
}

Status ShmEndpoint::push(MessageKind kind, uint64_t notify, std::span<const std::byte> payload) {
  if (!out_.try_push(kind, notify, payload)) ZW_TRY(wait_for_slot(kind, notify, payload));
  peer_segment_->ring_doorbell();
  return Status();
}

Status ShmEndpoint::wait_for_slot(MessageKind kind, uint64_t notify, std::span<const std::byte> payload) {
  const double timeout_s = knobs().timeout_s;
  const Deadline deadline = Deadline::after_seconds(timeout_s);
  const uint64_t start = now_ns();
  const uint64_t spin_ns = static_cast<uint64_t>(std::max<int64_t>(knobs().shm_spin_us, 0)) * 1000;
  uint64_t next_check = start;
  int sleep_us = 20;
  for (;;) {
    ZW_TRY(drain_into_backlog());  // the peer may be blocked sending to us
    if (out_.try_push(kind, notify, payload)) return Status();
    uint64_t now = now_ns();
    if (now >= next_check) {
      std::string why;
      if (process_exited(peer_address_, &why))
        return fail(Status(Code::kConnectionLost, "rank " + std::to_string(peer()) + " exited while rank " +
                                                      std::to_string(rank_) +
                                                      " waited for space in its shm ring: " + why));
      next_check = now + kLivenessCheckNs;
    }
    if (deadline.expired())
      return fail(Status(Code::kTimeout, "timed out after " + seconds_text(timeout_s) + " s waiting for " +
                                             peer_desc() + " to drain its shm ring (" + std::to_string(kRingSlots) +
                                             " messages pending): is it stuck or not polling? (ZW_TIMEOUT)"));
    if (now - start < spin_ns) {
      std::this_thread::yield();
      continue;
    }
    back_off(&sleep_us, deadline);
  }
}

Result<bool> ShmEndpoint::pop_ring(Message* out) {
  uint32_t raw_size = 0;
  for (;;) {
    if (!in_.try_pop(out, &raw_size)) return false;
    const RingMessage m = classify_ring_message(*out, raw_size);
    if (m.type == RingMessage::kMessage) return true;
    if (m.type == RingMessage::kMalformed)
      return fail(Status(Code::kProtocolError, "rank " + std::to_string(peer()) +
                                                   " sent a malformed shm message (kind " +
                                                   std::to_string(static_cast<int>(out->kind)) + ", " +
                                                   std::to_string(raw_size) + " bytes): is its memory corrupted?"));
    // Inside a region this rank registered and gave the peer the key of.
    std::memcpy(reinterpret_cast<void*>(m.address), m.bytes, m.size);  // NOLINT(performance-no-int-to-ptr)
    if (m.type == RingMessage::kInlinePart) continue;  // more of the same write follows; its last slot has the notify
    out->kind = MessageKind::kNotify;
    out->size = 0;
    return true;
  }
}

Status ShmEndpoint::drain_into_backlog() {
  Message message;
  for (;;) {
    auto got = pop_ring(&message);
    if (!got.ok()) return got.status();
    if (!got.value()) return Status();
    backlog_.push_back(message);
    own_->backlog().fetch_add(1);
  }
}

Result<bool> ShmEndpoint::poll(Message* out) {
  ZW_TRY(error_);
  if (!backlog_.empty()) {
    *out = backlog_.front();
    backlog_.pop_front();
    own_->backlog().fetch_sub(1);
    return true;
  }
  return pop_ring(out);
}

}  // namespace zw::transport
