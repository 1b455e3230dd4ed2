// The process-wide registry of zw::mem_alloc arenas (include/zerowire/memory.h) and the helpers the shm
// transport uses to find and map them.
//
// An arena is one memfd of whole 2 MiB units mapped MAP_SHARED at a 2 MiB-aligned address in its owner. The
// registry (a mutex-guarded map by base address) lets registration tell whether a buffer lies inside an
// arena, and lets a region ask whether its arena is still alive. Peers map an arena through
// /proc/<pid>/fd/<memfd>; the memfd's name ("zw-arena-<id>") lets them check that the descriptor they opened
// is the arena the key names and not a later file that reused the number.
// Non-goals: sub-allocation inside an arena, sharing across hosts, cleanup after a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace zw::transport {

// A live arena of this process.
struct ShmArenaInfo {
  uint64_t id = 0;     // unique in this process, increasing, never 0
  uintptr_t base = 0;  // first byte
  size_t length = 0;   // bytes mapped (whole 2 MiB)
  int memfd = -1;      // descriptor of the backing memfd in this process
};

inline constexpr size_t kShmArenaAlign = size_t{2} << 20;  // arenas are whole, aligned 2 MiB units

// The live arena that contains all of [ptr, ptr + bytes), if any.
std::optional<ShmArenaInfo> find_shm_arena(const void* ptr, size_t bytes);

// The memfd name of arena `id`, as /proc/<pid>/fd/<n> shows it: "/memfd:zw-arena-<id> (deleted)".
std::string shm_arena_memfd_name(uint64_t id);

// Maps `length` bytes of `fd` MAP_SHARED at a kShmArenaAlign-aligned address (MAP_POPULATE when `populate`);
// nullptr with errno set on failure. Unmap with munmap(p, length).
void* map_shm_arena(int fd, size_t length, bool populate);

}  // namespace zw::transport
