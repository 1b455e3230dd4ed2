// zw::mem_alloc / zw::mem_free and the registry of live arenas (see shm_arena.h).
#include "transport/shm/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "common/log.h"
#include "zerowire/memory.h"

namespace zw::transport {
namespace {

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, ShmArenaInfo> by_base;  // live arenas, keyed by their first byte
  std::atomic<uint64_t> version{0};           // bumped under mu by every change of by_base
  uint64_t next_id = 1;
};

// Never destroyed, so that buffers freed during static destruction still find it.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

Status create_error(const char* what, size_t length, int err) {
  Status s = system_error(std::string(what) + " for a " + mib(length) + " zw::mem_alloc arena", err);
  if (err == ENOMEM || err == ENOSPC || err == EMFILE || err == ENFILE)
    return Status(err == ENOMEM || err == ENOSPC ? Code::kOutOfMemory : Code::kSystem,
                  s.message() + ": free other arenas, lower the size, or raise the memory / open-file limits");
  return s;
}

}  // namespace

std::string shm_arena_memfd_name(uint64_t id) { return "zw-arena-" + std::to_string(id); }

void* map_shm_arena(int fd, size_t length, bool populate) {
  // Reserve length + one alignment unit, then map the file over the aligned part and trim the rest.
  void* reserve =
      ::mmap(nullptr, length + kShmArenaAlign, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) return nullptr;
  auto start = reinterpret_cast<uintptr_t>(reserve);
  uintptr_t aligned = (start + kShmArenaAlign - 1) & ~uintptr_t(kShmArenaAlign - 1);
  int flags = MAP_SHARED | MAP_FIXED | (populate ? MAP_POPULATE : 0);
  void* p = ::mmap(reinterpret_cast<void*>(aligned), length, PROT_READ | PROT_WRITE, flags, fd, 0);  // NOLINT
  if (p == MAP_FAILED) {
    int err = errno;
    ::munmap(reserve, length + kShmArenaAlign);
    errno = err;
    return nullptr;
  }
  if (aligned > start) ::munmap(reserve, aligned - start);
  uintptr_t end = aligned + length, reserve_end = start + length + kShmArenaAlign;
  if (reserve_end > end) ::munmap(reinterpret_cast<void*>(end), reserve_end - end);  // NOLINT
  return p;
}

std::optional<ShmArenaInfo> find_shm_arena(const void* ptr, size_t bytes) {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  Registry& r = registry();
  // Every operation asks about its buffers (a registration's validity), mostly the same ones: a thread's last answer
  // stands while no arena came or went since (no lock).
  struct Last {
    uint64_t version = ~uint64_t{0};
    uintptr_t p = 0;
    size_t bytes = 0;
    std::optional<ShmArenaInfo> found;
  };
  thread_local Last last;
  if (last.p == p && last.bytes == bytes && last.version == r.version.load(std::memory_order_acquire))
    return last.found;
  std::lock_guard<std::mutex> lock(r.mu);
  std::optional<ShmArenaInfo> found;
  auto it = r.by_base.upper_bound(p);
  if (it != r.by_base.begin()) {
    const ShmArenaInfo& a = std::prev(it)->second;
    if (p >= a.base && p - a.base <= a.length && bytes <= a.length - (p - a.base)) found = a;
  }
  last = Last{r.version.load(std::memory_order_relaxed), p, bytes, found};
  return found;
}

}  // namespace zw::transport

namespace zw {

Result<void*> mem_alloc(size_t bytes) {
  using transport::kShmArenaAlign;
  if (bytes == 0) return Status(Code::kInvalidArgument, "zw::mem_alloc of 0 bytes: ask for at least one byte");
  if (bytes > std::numeric_limits<size_t>::max() / 2)
    return Status(Code::kInvalidArgument,
                  "zw::mem_alloc of " + std::to_string(bytes) + " bytes is not a possible size");
  const size_t length = (bytes + kShmArenaAlign - 1) & ~(kShmArenaAlign - 1);
  transport::Registry& r = transport::registry();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    id = r.next_id++;
  }
  int fd = ::memfd_create(transport::shm_arena_memfd_name(id).c_str(), MFD_CLOEXEC);
  if (fd < 0) return transport::create_error("memfd_create", length, errno);
  // fallocate takes the pages now, so that running out of memory is an error here and not a SIGBUS in memset.
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0 || ::fallocate(fd, 0, 0, static_cast<off_t>(length)) != 0) {
    int err = errno;
    ::close(fd);
    return transport::create_error("ftruncate/fallocate", length, err);
  }
  void* p = transport::map_shm_arena(fd, length, false);
  if (p == nullptr) {
    int err = errno;
    ::close(fd);
    return transport::create_error("mmap", length, err);
  }
  ::madvise(p, length, MADV_HUGEPAGE);  // advisory: shmem huge pages depend on transparent_hugepage/shmem_enabled
  std::memset(p, 0, length);            // fault every page in now, not on the data path
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto base = reinterpret_cast<uintptr_t>(p);
    r.by_base[base] = transport::ShmArenaInfo{id, base, length, fd};
    r.version.fetch_add(1, std::memory_order_release);
  }
  ZW_TRACE(kShm, "mem_alloc: arena %llu of %zu bytes at %p (memfd %d)", static_cast<unsigned long long>(id), length, p,
           fd);
  return p;
}

Status mem_free(void* ptr) {
  if (ptr == nullptr)
    return Status(Code::kInvalidArgument, "zw::mem_free(nullptr): pass a pointer that zw::mem_alloc returned");
  transport::Registry& r = transport::registry();
  transport::ShmArenaInfo a;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto p = reinterpret_cast<uintptr_t>(ptr);
    auto it = r.by_base.find(p);
    if (it == r.by_base.end()) {
      auto inside = r.by_base.upper_bound(p);
      if (inside != r.by_base.begin() && p < std::prev(inside)->second.base + std::prev(inside)->second.length) {
        const auto& owner = std::prev(inside)->second;
        char base[32];
        std::snprintf(base, sizeof base, "%#llx", static_cast<unsigned long long>(owner.base));
        return Status(Code::kInvalidArgument, "zw::mem_free: pointer is " + std::to_string(p - owner.base) +
                                                  " bytes inside the allocation at " + base +
                                                  "; pass the pointer zw::mem_alloc returned");
      }
      return Status(Code::kInvalidArgument,
                    "zw::mem_free: pointer is not a live zw::mem_alloc allocation (freed twice, or memory from "
                    "another allocator: free that with its own allocator)");
    }
    a = it->second;
    r.by_base.erase(it);  // before unmapping: a concurrent registration must not find a dying arena
    r.version.fetch_add(1, std::memory_order_release);
  }
  ::munmap(reinterpret_cast<void*>(a.base), a.length);  // NOLINT(performance-no-int-to-ptr)
  ::close(a.memfd);
  ZW_TRACE(kShm, "mem_free: arena %llu at 0x%llx", static_cast<unsigned long long>(a.id),
           static_cast<unsigned long long>(a.base));
  return Status();
}

}  // namespace zw
