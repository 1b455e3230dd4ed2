// The mappings of one peer's zw::mem_alloc arenas into this process, used by ShmEndpoint::write to copy with
// memcpy instead of process_vm_writev.
//
// An arena is mapped on the first write that targets it (open /proc/<pid>/fd/<memfd>, check that the
// descriptor is the memfd of that arena id and has its length, mmap MAP_SHARED | MAP_POPULATE) and kept,
// keyed by (pid, arena id). At most kMaxMappings stay mapped: on every new mapping, the ones whose arena the
// peer has freed since are dropped, then the least recently used if still full. An arena that cannot be
// mapped (permissions, another pid namespace, a freed arena) is remembered as such and the caller falls back
// to process_vm_writev for it.
// Threading: not thread-safe; owned by one endpoint, which one thread drives (transport.h).
// Non-goals: noticing at write time that the peer freed an arena it still hands out keys for, or that the peer
// exited: a mapping keeps the arena's pages alive, so such a write lands in memory nobody reads, where
// process_vm_writev would have failed with EFAULT or ESRCH. The registration caches re-register on mem_free,
// and a dead peer is still noticed by the waits (ring space, peer_known_dead). A freed arena's pages stay
// referenced here until the next new mapping drops them or the endpoint goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/shm/shm_memory_region.h"

namespace zw::transport {

// Copies `n` bytes into a mapped arena. On x86-64, copies of more than kRepMovsbMin bytes use `rep movsb`:
// glibc 2.36 stops using it above 1 MiB (rep_movsb_stop_threshold) for a vector loop that on the AMD EPYC VMs
// we measure on reaches 16-19 GB/s for 32 MiB where `rep movsb` reaches 25 (and 12 against 22 for 256 MiB on
// 4 KiB shmem pages), which is what lets a large mapped write beat process_vm_writev (13-14 GB/s) at all.
// Ordering: the stores of one string instruction may complete out of order among themselves, but all before the
// stores of later instructions (Intel SDM vol. 3, "fast-string operation"); an sfence after it covers processors
// that use streaming stores for it, so the ring's release store of the notify that follows publishes every byte.
void copy_into_arena(std::byte* dst, const std::byte* src, size_t n);
inline constexpr size_t kRepMovsbMin = size_t{1} << 20;

class ShmPeerArenas {
 public:
  static constexpr size_t kMaxMappings = 16;

  ShmPeerArenas() = default;
  ~ShmPeerArenas();
  ShmPeerArenas(const ShmPeerArenas&) = delete;
  ShmPeerArenas& operator=(const ShmPeerArenas&) = delete;

  // The local address of the first byte of the arena `key` names (key.has_arena() must hold), or nullptr
  // when it cannot be mapped. On the first failure for an arena, *why says what went wrong (else it is left
  // empty), so that the caller logs once per arena.
  std::byte* map(const ShmRemoteKey& key, std::string* why);

  size_t mapped() const;  // arenas currently mapped (not counting failed ones)

 private:
  struct Mapping {
    int32_t pid;        // owner process
    uint64_t arena_id;  // the owner's arena id
    int32_t memfd;      // the owner's descriptor number (to check later whether it still names this arena)
    std::byte* base;    // local mapping; nullptr: mapping failed, use process_vm_writev
    size_t length;      // bytes mapped
    uint64_t last_use;  // for LRU eviction
  };
  std::byte* map_new(const ShmRemoteKey& key, std::string* why);
  void drop_freed_and_evict();
  static void unmap(Mapping& m);

  std::vector<Mapping> maps_;
  size_t hot_ = 0;  // index of the last mapping used
  uint64_t clock_ = 0;
};

}  // namespace zw::transport
