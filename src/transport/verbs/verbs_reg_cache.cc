// The verbs registration cache: lookups by range, LRU eviction, and the page-frame check (see the header).
#include "transport/verbs/verbs_reg_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace zw::transport::verbs {
namespace {

constexpr uint64_t kPfnMask = (uint64_t{1} << 55) - 1;  // pagemap bits 0-54: page frame number
constexpr uint64_t kPresent = uint64_t{1} << 63;        // pagemap bit 63: page present

size_t page_size() {
  static const size_t size = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

// The process's /proc/self/pagemap, opened once (-1 when it cannot be opened).
int pagemap_fd() {
  static const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  return fd;
}

// Indexes (relative to the first page) of the pages sampled in a range of `pages` pages.
std::vector<size_t> sample_pages(size_t pages) {
  std::vector<size_t> out;
  if (pages <= kFrameSamples) {
    for (size_t i = 0; i < pages; ++i) out.push_back(i);
    return out;
  }
  for (size_t i = 0; i < kFrameSamples; ++i) out.push_back(i * (pages - 1) / (kFrameSamples - 1));
  return out;
}

}  // namespace

std::vector<uint64_t> read_page_frames(uintptr_t start, size_t bytes) {
  if (bytes == 0 || pagemap_fd() < 0) return {};
  const size_t ps = page_size();
  const uintptr_t first = start / ps, last = (start + bytes - 1) / ps;
  const std::vector<size_t> pages = sample_pages(last - first + 1);
  std::vector<uint64_t> frames(pages.size(), 0);
  bool contiguous = pages.size() == last - first + 1;
  if (contiguous) {
    off_t off = static_cast<off_t>(first * sizeof(uint64_t));
    ssize_t want = static_cast<ssize_t>(frames.size() * sizeof(uint64_t));
    if (::pread(pagemap_fd(), frames.data(), static_cast<size_t>(want), off) != want) return {};
  } else {
    for (size_t i = 0; i < pages.size(); ++i) {
      off_t off = static_cast<off_t>((first + pages[i]) * sizeof(uint64_t));
      if (::pread(pagemap_fd(), &frames[i], sizeof(uint64_t), off) != sizeof(uint64_t)) return {};
    }
  }
  bool any = false;
  for (uint64_t& f : frames) {
    f = (f & kPresent) ? (f & kPfnMask) : 0;
    any = any || f != 0;
  }
  // Present pages that all read as frame 0: the kernel hides frame numbers from this process.
  return any ? frames : std::vector<uint64_t>{};
}

bool page_frames_readable() {
  static const bool readable = [] {
    std::vector<char> probe(2 * page_size(), 1);  // touched, so present
    return !read_page_frames(reinterpret_cast<uintptr_t>(probe.data()), probe.size()).empty();
  }();
  return readable;
}

Result<std::shared_ptr<VerbsRegCache>> VerbsRegCache::create(std::shared_ptr<VerbsDevice> device,
                                                             const RegCacheConfig& config) {
  MappingCheck check = config.check;
  if (check != MappingCheck::kTrust && !page_frames_readable()) {
    if (check == MappingCheck::kPagemap)
      return Status(Code::kInvalidArgument,
                    "ZW_IB_REG_CACHE=pagemap: this process cannot read page frame numbers from /proc/self/pagemap "
                    "(needs CAP_SYS_ADMIN); grant it, or set ZW_IB_REG_CACHE=trust and never free a buffer that "
                    "was passed to a collective while the communicator lives");
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      ZW_WARN(kVerbs,
              "verbs registration cache: cannot read page frame numbers (no CAP_SYS_ADMIN), so a buffer that "
              "is freed and reallocated at the same address would reuse a stale registration; buffers given to "
              "collectives must stay allocated while the communicator lives (or run with CAP_SYS_ADMIN; "
              "ZW_IB_REG_CACHE=trust silences this)");
    check = MappingCheck::kTrust;
  } else if (check == MappingCheck::kAuto) {
    check = MappingCheck::kPagemap;
  }
  ZW_INFO(kVerbs, "registration cache: %s check, up to %zu entries / %zu bytes",
          check == MappingCheck::kPagemap ? "page-frame" : "no (trusted addresses)", config.max_entries,
          config.max_bytes);
  return std::shared_ptr<VerbsRegCache>(new VerbsRegCache(std::move(device), config, check));
}

bool VerbsRegCache::still_valid(const VerbsRegistration& reg) const {
  if (check_ != MappingCheck::kPagemap || reg.frames.empty()) return true;
  return read_page_frames(reg.start, reg.bytes) == reg.frames;
}

Result<std::unique_ptr<MemoryRegion>> VerbsRegCache::register_memory(MemRef mem) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(mem.ptr);
  std::lock_guard<std::mutex> lock(mu_);
  if (mem.kind == MemKind::kHost && mem.bytes > 0) {
    for (auto it = lru_.begin(); it != lru_.end();) {
      const VerbsRegistration& r = **it;
      if (!(r.start <= p && p + mem.bytes <= r.start + r.bytes)) {
        ++it;
        continue;
      }
      if (!still_valid(r)) {
        ZW_INFO(kVerbs, "registration of [%#lx, +%zu) is stale (its memory was freed or remapped): registering again",
                static_cast<unsigned long>(r.start), r.bytes);
        ++stats_.invalidations;
        stats_.bytes -= r.bytes;
        it = lru_.erase(it);
        continue;
      }
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it);
      return std::unique_ptr<MemoryRegion>(new VerbsMemoryRegion(mem, lru_.front(), shared_from_this()));
    }
  }
  ZW_ASSIGN_OR_RETURN(std::shared_ptr<VerbsRegistration> reg, register_verbs_range(device_, mem));
  ++stats_.misses;
  if (reg->mr) {
    std::lock_guard<std::mutex> live_lock(live_mu_);
    live_[reg->mr->rkey] = reg;
    if (live_.size() >= prune_at_) {
      std::erase_if(live_, [](const auto& kv) { return kv.second.expired(); });
      prune_at_ = std::max<size_t>(64, 2 * live_.size());
    }
  }
  if (check_ == MappingCheck::kPagemap) reg->frames = read_page_frames(reg->start, reg->bytes);
  if (mem.bytes > 0 && config_.max_entries > 0 && mem.bytes <= config_.max_bytes) {
    lru_.push_front(reg);
    stats_.bytes += reg->bytes;
    evict_locked();
  }
  return std::unique_ptr<MemoryRegion>(new VerbsMemoryRegion(mem, std::move(reg), shared_from_this()));
}

void VerbsRegCache::evict_locked() {
  while (lru_.size() > config_.max_entries || stats_.bytes > config_.max_bytes) {
    stats_.bytes -= lru_.back()->bytes;
    lru_.pop_back();  // live handles keep the MR until they go
    ++stats_.evictions;
  }
}

bool VerbsRegCache::copy_in_slow(uint32_t rkey, uint64_t address, const void* src, size_t bytes, LiveHint* hint,
                                 uint64_t destroyed) const {
  auto inside = [&](uintptr_t start, size_t len) {
    return address >= start && bytes <= len && address - start <= len - bytes;
  };
  std::lock_guard<std::mutex> lock(live_mu_);
  auto it = live_.find(rkey);
  if (it == live_.end()) return false;
  std::shared_ptr<VerbsRegistration> reg = it->second.lock();
  if (!reg || !reg->mr || reg->mr->rkey != rkey || !inside(reg->start, reg->bytes)) return false;
  std::memcpy(reinterpret_cast<void*>(address), src, bytes);
  if (hint) *hint = LiveHint{rkey, reg->start, reg->bytes, destroyed};
  return true;
}

VerbsRegCache::Stats VerbsRegCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.entries = lru_.size();
  return s;
}

}  // namespace zw::transport::verbs
