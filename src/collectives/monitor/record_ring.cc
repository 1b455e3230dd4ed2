// The record ring: storage (anonymous or a mapped file), the seqlock writer and the copying reader.
#include "collectives/monitor/record_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cerrno>
#include <cstring>
#include <ctime>

#include "collectives/monitor/op_stats.h"

namespace zw::internal::monitor {
namespace {

size_t round_up_pow2(size_t n) {
  size_t p = 16;
  while (p < n && p < (size_t{1} << 24)) p <<= 1;
  return p;
}

void copy_text(char* dst, size_t cap, const std::string& text) {
  size_t n = std::min(cap - 1, text.size());
  std::memcpy(dst, text.data(), n);
  dst[n] = '\0';
}

uint64_t clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

Result<std::unique_ptr<RecordRing>> RecordRing::create(size_t capacity, const RingIdentity& who,
                                                       const std::string& file) {
  std::unique_ptr<RecordRing> ring(new RecordRing());
  ring->capacity_ = round_up_pow2(capacity);
  ring->capacity_log2_ = static_cast<unsigned>(__builtin_ctzll(ring->capacity_));
  const size_t bytes = sizeof(RingHeader) + ring->capacity_ * sizeof(RecordSlot);
  void* p = MAP_FAILED;
  if (file.empty()) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return Status(Code::kOutOfMemory, "rank " + std::to_string(who.rank) + ": cannot map " + std::to_string(bytes) +
                                            " bytes for the operation records: " + std::strerror(errno) +
                                            " (lower ZW_MONITOR_RECORDS)");
  } else {
    int fd = open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      std::string why = std::strerror(errno);
      if (fd >= 0) close(fd);
      return Status(Code::kSystem, "rank " + std::to_string(who.rank) + ": cannot create the flight-recorder file " +
                                       file + ": " + why + " (check ZW_FLIGHT_DIR exists and is writable)");
    }
    // The file's blocks are reserved now: a full disk is an error here rather than a SIGBUS on an operation's path.
    const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (reserved != 0) {
      close(fd);
      return Status(Code::kSystem, "rank " + std::to_string(who.rank) + ": cannot reserve " + std::to_string(bytes) +
                                       " bytes for the flight-recorder file " + file + ": " + std::strerror(reserved) +
                                       " (free space in ZW_FLIGHT_DIR, or lower ZW_MONITOR_RECORDS)");
    }
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    std::string why = p == MAP_FAILED ? std::strerror(errno) : "";
    close(fd);
    if (p == MAP_FAILED)
      return Status(Code::kSystem,
                    "rank " + std::to_string(who.rank) + ": cannot map the flight-recorder file " + file + ": " + why);
    ring->file_ = file;
  }
  // Zero already (a fresh file or anonymous memory), but written once now: otherwise the first lap of the ring takes a
  // page fault every 64 records on the operations' path (a 2-rank 4 KiB all-gather run within the first lap of a
  // 65,536-record ring cost 3.6 points more than with 8,192 records; written here first, no more, docs/PERF.md).
  std::memset(p, 0, bytes);
  ring->base_ = p;
  ring->mapped_bytes_ = bytes;
  ring->header_ = static_cast<RingHeader*>(p);
  ring->slots_ = reinterpret_cast<RecordSlot*>(static_cast<char*>(p) + sizeof(RingHeader));
  ring->writer_ = RingWriter{ring->slots_, ring->capacity_log2_, cpu_has_prefetchw()};
  RingHeader& h = *ring->header_;
  std::memcpy(h.magic, kRingMagic, sizeof h.magic);
  h.version = kRingVersion;
  h.header_bytes = sizeof(RingHeader);
  h.slot_bytes = sizeof(RecordSlot);
  h.capacity = static_cast<uint32_t>(ring->capacity_);
  h.rank = who.rank;
  h.size = who.size;
  h.pid = static_cast<int32_t>(getpid());
  h.generation = who.generation;
  h.realtime_ns = clock_ns(CLOCK_REALTIME);
  h.monotonic_ns = clock_ns(CLOCK_MONOTONIC);
  copy_text(h.host, sizeof h.host, who.host);
  copy_text(h.comm, sizeof h.comm, who.comm);
  copy_text(h.transport, sizeof h.transport, who.transport);
  return ring;
}

bool cpu_has_prefetchw() {
#if defined(__x86_64__)
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & bit_PRFCHW) != 0;
  }();
  return has;
#else
  return false;
#endif
}

RecordRing::~RecordRing() {
  if (base_) munmap(base_, mapped_bytes_);
}

void RecordRing::mark_failed(const std::string& reason) {
  if (header_->failed.load(std::memory_order_relaxed) != 0) return;
  copy_text(header_->reason, sizeof header_->reason, reason);
  header_->failed.store(1, std::memory_order_release);
  if (!file_.empty()) msync(base_, mapped_bytes_, MS_ASYNC);
}

bool RecordRing::read_slot(size_t i, OpFields* out, uint64_t* version) const {
  SlotCopy c;
  if (!copy_slot(slots_[i & (capacity_ - 1)], &c) || c.version == 0 || (c.version & 1)) return false;
  fields_of(c, header_->size, out);
  if (version) *version = c.version;
  return true;
}

bool RecordRing::has_begun(uint64_t index) const {
  const uint64_t v = slots_[index & (capacity_ - 1)].version.load(std::memory_order_acquire);
  return v >= ((index >> capacity_log2_) << 2) + 1;
}

uint64_t RecordRing::begun() const {
  // Records [0, n) have begun and none after: gallop from the last answer to a record not begun, then bisect.
  uint64_t lo = begun_hint_.load(std::memory_order_relaxed);  // every record below lo has begun
  if (has_begun(lo)) {
    ++lo;
    uint64_t step = 1, hi = lo;  // hi: a record not begun
    while (has_begun(hi)) {
      lo = hi + 1;
      step <<= 1;
      hi = lo + step - 1;
    }
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (has_begun(mid))
        lo = mid + 1;
      else
        hi = mid;
    }
  }
  uint64_t seen = begun_hint_.load(std::memory_order_relaxed);
  while (seen < lo && !begun_hint_.compare_exchange_weak(seen, lo, std::memory_order_relaxed)) {
  }
  return lo;
}

std::vector<OpFields> RecordRing::snapshot() const {
  const uint64_t written = begun();
  const uint64_t first = written > capacity_ ? written - capacity_ : 0;
  std::vector<OpFields> out;
  out.reserve(static_cast<size_t>(written - first));
  for (uint64_t i = first; i < written; ++i) {
    OpFields f;
    if (read_slot(static_cast<size_t>(i), &f)) out.push_back(f);
  }
  return out;
}

bool RecordRing::running(OpFields* out) const {
  const uint64_t written = begun();
  if (written == 0) return false;
  OpFields f;
  if (!read_slot(static_cast<size_t>(written - 1), &f) || f.state != static_cast<uint8_t>(OpState::kRunning))
    return false;
  *out = f;
  return true;
}

uint64_t RecordRing::finished_through() const {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const uint64_t written = begun();
    if (written == 0) return 0;
    OpFields f;
    if (read_slot(static_cast<size_t>(written - 1), &f))
      return f.state == static_cast<uint8_t>(OpState::kRunning) ? f.seq - 1 : f.seq;
    // Its writer is storing into it now: the record before it is finished (unless a lap overwrote it meanwhile).
    if (written >= 2 && read_slot(static_cast<size_t>(written - 2), &f)) return f.seq;
  }
  return 0;
}

}  // namespace zw::internal::monitor
