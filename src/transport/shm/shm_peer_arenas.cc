// ShmPeerArenas: maps a peer's zw::mem_alloc arenas through /proc/<pid>/fd (see shm_peer_arenas.h).
#include "transport/shm/shm_peer_arenas.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/shm/shm_arena.h"

namespace zw::transport {
namespace {

std::string fd_path(int32_t pid, int32_t fd) { return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd); }

// Whether the descriptor at `path` is the memfd of arena `id` ("/memfd:zw-arena-<id> (deleted)").
bool names_arena(const std::string& path, uint64_t id) {
  char buf[256];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return false;
  buf[n] = '\0';
  std::string want = "/memfd:" + shm_arena_memfd_name(id);
  return std::strncmp(buf, want.c_str(), want.size()) == 0 && (buf[want.size()] == '\0' || buf[want.size()] == ' ');
}

}  // namespace

void copy_into_arena(std::byte* dst, const std::byte* src, size_t n) {
#if defined(__x86_64__)
  if (n > kRepMovsbMin) {
    asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
    // Intel orders a string operation's stores before later stores (SDM vol. 3 8.2.4.1); a large one may use
    // weakly-ordered streaming stores elsewhere, so fence before the notify's release store publishes them.
    __builtin_ia32_sfence();
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

ShmPeerArenas::~ShmPeerArenas() {
  for (Mapping& m : maps_) unmap(m);
}

void ShmPeerArenas::unmap(Mapping& m) {
  if (m.base) ::munmap(m.base, m.length);
  m.base = nullptr;
}

size_t ShmPeerArenas::mapped() const {
  return static_cast<size_t>(std::count_if(maps_.begin(), maps_.end(), [](const Mapping& m) { return m.base; }));
}

std::byte* ShmPeerArenas::map(const ShmRemoteKey& key, std::string* why) {
  ++clock_;
  if (hot_ < maps_.size() && maps_[hot_].arena_id == key.arena_id && maps_[hot_].pid == key.pid) {
    maps_[hot_].last_use = clock_;
    return maps_[hot_].base;
  }
  for (size_t i = 0; i < maps_.size(); ++i) {
    if (maps_[i].arena_id == key.arena_id && maps_[i].pid == key.pid) {
      hot_ = i;
      maps_[i].last_use = clock_;
      return maps_[i].base;
    }
  }
  return map_new(key, why);
}

void ShmPeerArenas::drop_freed_and_evict() {
  // Failed entries stay (until evicted) so that writes into an unmappable arena do not retry open() each time.
  std::erase_if(maps_, [](Mapping& m) {
    if (m.base == nullptr || names_arena(fd_path(m.pid, m.memfd), m.arena_id)) return false;
    unmap(m);  // the peer freed this arena: release our reference to its pages
    return true;
  });
  while (maps_.size() >= kMaxMappings) {
    auto lru = std::min_element(maps_.begin(), maps_.end(),
                                [](const Mapping& a, const Mapping& b) { return a.last_use < b.last_use; });
    unmap(*lru);
    maps_.erase(lru);
  }
}

std::byte* ShmPeerArenas::map_new(const ShmRemoteKey& key, std::string* why) {
  drop_freed_and_evict();
  Mapping m{key.pid, key.arena_id, key.memfd, nullptr, static_cast<size_t>(key.arena_length), clock_};
  const std::string path = fd_path(key.pid, key.memfd);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *why = "cannot open " + path + ": " + std::strerror(errno);
  } else {
    struct stat st {};
    if (!names_arena("/proc/self/fd/" + std::to_string(fd), key.arena_id)) {
      *why = path + " is not the memfd of arena " + std::to_string(key.arena_id) + " (freed since?)";
    } else if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != key.arena_length) {
      *why = path + " does not have the arena's " + std::to_string(key.arena_length) + " bytes";
    } else if (void* p = map_shm_arena(fd, m.length, true); p == nullptr) {
      *why = "cannot map " + std::to_string(m.length) + " bytes of " + path + ": " + std::strerror(errno);
    } else {
      m.base = static_cast<std::byte*>(p);
    }
    ::close(fd);
  }
  maps_.push_back(m);
  hot_ = maps_.size() - 1;
  return m.base;
}

}  // namespace zw::transport
