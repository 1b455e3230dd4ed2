// The shm segment: creation, mapping, the SPSC rings and the futex doorbell.
#include "transport/shm/shm_queue.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#if defined(__x86_64__) || defined(__i386__)
#endif

#include "common/clock.h"
#include "common/log.h"
#include "common/socket.h"
#include "common/topology.h"

namespace zw::transport {
namespace {

static_assert(std::atomic_ref<uint64_t>::is_always_lock_free && std::atomic_ref<uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to work across processes");

constexpr size_t kPage = 4096;

template <typename T>
std::atomic_ref<T> shared(T& field) {
  return std::atomic_ref<T>(field);
}

size_t header_bytes(int world_size) {
  size_t bytes = sizeof(SegmentHeader) + static_cast<size_t>(world_size) * sizeof(RingControl);
  return (bytes + kPage - 1) / kPage * kPage;
}

// Pre-faults the whole mapping once (first touch of a page costs 12-20 us on these VMs).
void prefault(void* base, size_t bytes) {
  ::madvise(base, bytes, MADV_HUGEPAGE);  // best effort: tmpfs may not do huge pages
  if (::madvise(base, bytes, MADV_POPULATE_WRITE) == 0) return;
  auto* p = static_cast<volatile char*>(base);
  for (size_t off = 0; off < bytes; off += kPage) p[off] = 0;
}

// Removes `name` when it is a segment left behind by an exited owner; otherwise explains the clash.
Status reclaim_stale(const std::string& name) {
  net::Fd fd(::shm_open(name.c_str(), O_RDONLY, 0));
  if (!fd.valid()) return errno == ENOENT ? Status() : system_error("cannot inspect shm segment " + name, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return system_error("cannot stat shm segment " + name, errno);
  int32_t owner = 0;
  uint64_t magic = 0;
  if (static_cast<size_t>(st.st_size) >= sizeof(SegmentHeader)) {
    void* p = ::mmap(nullptr, sizeof(SegmentHeader), PROT_READ, MAP_SHARED, fd.get(), 0);
    if (p != MAP_FAILED) {
      auto* h = static_cast<SegmentHeader*>(p);
      magic = shared(h->magic).load(std::memory_order_acquire);
      owner = h->owner_pid;
      ::munmap(p, sizeof(SegmentHeader));
    }
  }
  if (magic == kSegmentMagic && owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH) {
    ZW_INFO(kShm, "removing stale shm segment %s of exited pid %d", name.c_str(), owner);
    if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT)
      return system_error("cannot remove stale shm segment " + name, errno);
    return Status();
  }
  return Status(Code::kConnectionFailed, "shm segment " + name + " already exists" +
                                             (owner > 0 ? " and belongs to running pid " + std::to_string(owner) : "") +
                                             ": is the job id used by two communicators at once? (remove /dev/shm" +
                                             name + " if it is left over)");
}

// The owner pid recorded in the header of an initialized segment of ours, or 0.
int32_t segment_owner(const std::string& name) {
  net::Fd fd(::shm_open(name.c_str(), O_RDONLY, 0));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(SegmentHeader)) return 0;
  void* p = ::mmap(nullptr, sizeof(SegmentHeader), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return 0;
  auto* h = static_cast<SegmentHeader*>(p);
  const int32_t owner = shared(h->magic).load(std::memory_order_acquire) == kSegmentMagic ? h->owner_pid : 0;
  ::munmap(p, sizeof(SegmentHeader));
  return owner;
}

Status check_field(const std::string& name, const char* what, int64_t found, int64_t expected) {
  if (found == expected) return Status();
  return Status(Code::kProtocolError, "shm segment " + name + " has " + what + " " + std::to_string(found) + " but " +
                                          std::to_string(expected) +
                                          " was expected: do all ranks run the same zerowire build and world size?");
}

// Whether the ranks of a world this size outnumber the CPUs this process may run on (all ranks share the host).
bool outnumbers_cpus(int world_size) { return world_size > usable_cpus(); }

long futex(uint32_t* word, int op, uint32_t value, const timespec* timeout) {
  // Plain (not FUTEX_PRIVATE) operations: the word is shared between processes.
  return ::syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

}  // namespace

ShmRingProducer::ShmRingProducer(RingControl* control, ShmSlot* slots)
    : control_(control),
      slots_(slots),
      tail_(shared(control->tail).load(std::memory_order_relaxed)),
      head_cache_(shared(control->head).load(std::memory_order_acquire)) {}

bool ShmRingProducer::try_push(MessageKind kind, uint64_t notify, std::span<const std::byte> payload) {
  if (tail_ - head_cache_ >= kRingSlots) {
    head_cache_ = shared(control_->head).load(std::memory_order_acquire);
    if (tail_ - head_cache_ >= kRingSlots) return false;
  }
  ShmSlot& slot = slots_[tail_ % kRingSlots];
  slot.size = static_cast<uint32_t>(payload.size());
  slot.kind = static_cast<uint8_t>(kind);
  slot.notify = notify;
  if (!payload.empty()) std::memcpy(slot.data, payload.data(), payload.size());
  ++tail_;
  shared(control_->tail).store(tail_, std::memory_order_release);
  return true;
}

ShmRingConsumer::ShmRingConsumer(RingControl* control, ShmSlot* slots)
    : control_(control), slots_(slots), head_(shared(control->head).load(std::memory_order_relaxed)) {
  tail_cache_ = head_;
}

bool ShmRingConsumer::try_pop(Message* out, uint32_t* raw_size) {
  if (head_ == tail_cache_) {
    tail_cache_ = shared(control_->tail).load(std::memory_order_acquire);
    if (head_ == tail_cache_) return false;
  }
  const ShmSlot& slot = slots_[head_ % kRingSlots];
  *raw_size = slot.size;
  out->kind = static_cast<MessageKind>(slot.kind);
  out->notify = slot.notify;
  out->size = std::min<uint32_t>(slot.size, Message::kMaxControl);
  if (out->size > 0) std::memcpy(out->data.data(), slot.data, out->size);
  ++head_;
  shared(control_->head).store(head_, std::memory_order_release);
  return true;
}

RingMessage classify_ring_message(const Message& message, uint32_t raw_size) {
  RingMessage m;
  const bool inline_write = message.kind == kInlineWriteKind || message.kind == kInlinePartKind;
  if (inline_write && raw_size >= sizeof(uint64_t) && raw_size <= Message::kMaxControl) {
    m.type = message.kind == kInlinePartKind ? RingMessage::kInlinePart : RingMessage::kInlineWrite;
    std::memcpy(&m.address, message.data.data(), sizeof m.address);
    m.bytes = message.data.data() + sizeof m.address;
    m.size = raw_size - sizeof m.address;
  } else if (raw_size <= Message::kMaxControl &&
             (message.kind == MessageKind::kNotify || message.kind == MessageKind::kControl)) {
    m.type = RingMessage::kMessage;
  }
  return m;
}

size_t ShmSegment::segment_bytes(int world_size) {
  return header_bytes(world_size) + static_cast<size_t>(world_size) * kRingSlots * sizeof(ShmSlot);
}

ShmSegment::ShmSegment(std::string name, void* base, size_t bytes, int world_size, bool owner)
    : name_(std::move(name)),
      base_(base),
      bytes_(bytes),
      world_size_(world_size),
      owner_(owner),
      creator_pid_(static_cast<int32_t>(::getpid())),
      oversubscribed_(outnumbers_cpus(world_size)),
      linked_(owner) {}

ShmSegment::~ShmSegment() {
  unlink();
  ::munmap(base_, bytes_);
}

Result<std::shared_ptr<ShmSegment>> ShmSegment::create(const std::string& name, int owner_rank, int world_size) {
  int fd_raw = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd_raw < 0 && errno == EEXIST) {
    ZW_TRY(reclaim_stale(name));
    fd_raw = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  }
  if (fd_raw < 0) {
    int err = errno;
    ZW_WARN(kShm, "cannot create shm segment %s: %s", name.c_str(), std::strerror(err));
    return system_error("cannot create shm segment " + name + " (is /dev/shm mounted and writable?)", err);
  }
  net::Fd fd(fd_raw);
  size_t bytes = segment_bytes(world_size);
  if (int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); err != 0) {
    ::shm_unlink(name.c_str());
    ZW_WARN(kShm, "cannot reserve %zu bytes for shm segment %s: %s", bytes, name.c_str(), std::strerror(err));
    return system_error("cannot reserve " + std::to_string(bytes) + " bytes for shm segment " + name +
                            " (is /dev/shm too small? with docker, raise --shm-size)",
                        err);
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    int err = errno;
    ::shm_unlink(name.c_str());
    return system_error("cannot map shm segment " + name, err);
  }
  std::shared_ptr<ShmSegment> segment(new ShmSegment(name, base, bytes, world_size, /*owner=*/true));
  prefault(base, bytes);
  SegmentHeader* h = segment->header();
  h->version = kSegmentVersion;
  h->world_size = static_cast<uint32_t>(world_size);
  h->owner_rank = owner_rank;
  h->owner_pid = static_cast<int32_t>(::getpid());
  h->ring_slots = kRingSlots;
  h->slot_bytes = sizeof(ShmSlot);
  shared(h->magic).store(kSegmentMagic, std::memory_order_release);
  ZW_INFO(kShm, "created shm segment %s (%zu bytes, %d rings of %u slots)", name.c_str(), bytes, world_size,
          kRingSlots);
  return segment;
}

Result<std::shared_ptr<ShmSegment>> ShmSegment::open(const std::string& name, int owner_rank, int32_t owner_pid,
                                                     int world_size) {
  net::Fd fd(::shm_open(name.c_str(), O_RDWR, 0));
  if (!fd.valid()) {
    if (errno == ENOENT) return Status(Code::kNotFound, "shm segment " + name + " does not exist");
    return system_error("cannot open shm segment " + name + " (does it belong to another user's job?)", errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return system_error("cannot stat shm segment " + name, errno);
  size_t bytes = segment_bytes(world_size);
  if (st.st_size == 0) return Status(Code::kNotFound, "shm segment " + name + " is still being created");
  ZW_TRY(check_field(name, "a size of", st.st_size, static_cast<int64_t>(bytes)));
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (base == MAP_FAILED) return system_error("cannot map shm segment " + name, errno);
  std::shared_ptr<ShmSegment> segment(new ShmSegment(name, base, bytes, world_size, /*owner=*/false));
  SegmentHeader* h = segment->header();
  uint64_t magic = shared(h->magic).load(std::memory_order_acquire);
  if (magic == 0) return Status(Code::kNotFound, "shm segment " + name + " is still being initialized");
  if (magic != kSegmentMagic) return Status(Code::kProtocolError, "shm segment " + name + " is not a zerowire segment");
  ZW_TRY(check_field(name, "version", h->version, kSegmentVersion));
  ZW_TRY(check_field(name, "world size", h->world_size, world_size));
  ZW_TRY(check_field(name, "owner rank", h->owner_rank, owner_rank));
  ZW_TRY(check_field(name, "owner pid", h->owner_pid, owner_pid));
  ZW_TRY(check_field(name, "ring slots", h->ring_slots, kRingSlots));
  ZW_TRY(check_field(name, "slot size", h->slot_bytes, sizeof(ShmSlot)));
  return segment;
}

RingControl* ShmSegment::control(int producer_rank) const {
  return reinterpret_cast<RingControl*>(static_cast<char*>(base_) + sizeof(SegmentHeader)) + producer_rank;
}

ShmSlot* ShmSegment::slots(int producer_rank) const {
  auto* first = reinterpret_cast<ShmSlot*>(static_cast<char*>(base_) + header_bytes(world_size_));
  return first + static_cast<size_t>(producer_rank) * kRingSlots;
}

void ShmSegment::mark_attached(int producer_rank, int32_t pid) {
  auto attached_pid = shared(control(producer_rank)->attached_pid);
  if (attached_pid.load(std::memory_order_acquire) != 0) return;
  // Count first, so that an owner that sees the pid also sees the count.
  shared(header()->attached_count).fetch_add(1, std::memory_order_acq_rel);
  attached_pid.store(pid, std::memory_order_release);
}

void ShmSegment::ring_doorbell() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  SegmentHeader* h = header();
  if (shared(h->sleeping).load(std::memory_order_seq_cst) == 0) return;
  // Only the producer that clears the flag rings: the others' messages are seen by the owner once it is awake (a
  // FUTEX_WAKE per producer for one sleeper is a wasted system call each, many of them at larger world sizes).
  if (shared(h->sleeping).exchange(0, std::memory_order_seq_cst) == 0) return;
  shared(h->doorbell).fetch_add(1, std::memory_order_seq_cst);
  futex(&h->doorbell, FUTEX_WAKE, INT_MAX, nullptr);
}

bool ShmSegment::attached(int producer_rank) const {
  return shared(control(producer_rank)->attached_pid).load(std::memory_order_acquire) != 0;
}

void ShmSegment::unlink_if_all_attached() {
  if (shared(header()->attached_count).load(std::memory_order_acquire) >= static_cast<uint32_t>(world_size_ - 1))
    unlink();
}

void ShmSegment::unlink() {
  if (!owner_ || creator_pid_ != ::getpid() || !linked_.exchange(false, std::memory_order_acq_rel)) return;
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT)
    ZW_WARN(kShm, "cannot unlink shm segment %s: %s", name_.c_str(), std::strerror(errno));
  else
    ZW_INFO(kShm, "unlinked shm segment %s", name_.c_str());
}

bool ShmSegment::any_pending() const {
  if (backlog_.load(std::memory_order_acquire) > 0) return true;
  int owner = header()->owner_rank;
  for (int r = 0; r < world_size_; ++r) {
    if (r == owner) continue;
    RingControl* c = control(r);
    if (shared(c->tail).load(std::memory_order_acquire) != shared(c->head).load(std::memory_order_relaxed)) return true;
  }
  return false;
}

constexpr uint64_t kHotPollNs = 5000;

uint64_t ShmSegment::wait(std::chrono::microseconds timeout, int64_t spin_us) {
  const uint64_t start = now_ns();
  const uint64_t total_ns = static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 0)) * 1000;
  const uint64_t spin_ns = std::min<uint64_t>(static_cast<uint64_t>(std::max<int64_t>(spin_us, 0)) * 1000, total_ns);
  // A peer running on another core answers within a few microseconds: poll hot for that long, then yield.
  const uint64_t hot_ns = oversubscribed_ ? 0 : std::min<uint64_t>(kHotPollNs, spin_ns);
  uint64_t looked = start;  // the clock as of the last look that found nothing
  do {
    if (any_pending()) return looked;
    _mm_pause();
    looked = now_ns();
  } while (looked - start < hot_ns);
  do {
    if (any_pending()) return looked;
    sched_yield();
    looked = now_ns();
  } while (looked - start < spin_ns);
  const uint64_t elapsed = looked - start;
  if (elapsed >= total_ns) return looked;
  SegmentHeader* h = header();
  uint32_t seq = shared(h->doorbell).load(std::memory_order_seq_cst);
  shared(h->sleeping).store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!any_pending()) {
    uint64_t left = total_ns - elapsed;
    timespec ts{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
    futex(&h->doorbell, FUTEX_WAIT, seq, &ts);  // EAGAIN (rung meanwhile), EINTR, ETIMEDOUT: all mean "look"
    looked = now_ns();  // woken: what rang is at most a wake-up old
  }
  shared(h->sleeping).store(0, std::memory_order_seq_cst);
  return looked;
}

int reclaim_shm_segments_of(const std::vector<int>& pids) {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir))
    if (std::strncmp(e->d_name, "zw-", 3) == 0) names.push_back(std::string("/") + e->d_name);
  ::closedir(dir);
  int removed = 0;
  for (const std::string& name : names) {
    const int32_t owner = segment_owner(name);
    if (owner <= 0 || std::find(pids.begin(), pids.end(), owner) == pids.end()) continue;
    if (::kill(owner, 0) == 0 || errno != ESRCH) continue;  // still running (or not ours to judge)
    if (::shm_unlink(name.c_str()) == 0) {
      ZW_INFO(kShm, "removed shm segment %s left by exited pid %d", name.c_str(), owner);
      ++removed;
    }
  }
  return removed;
}

}  // namespace zw::transport
