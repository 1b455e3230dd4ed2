// Registered buffers of a communicator: a registration cache for user buffers and a scratch arena.
//
// User buffers are registered on first use and kept (LRU, bounded) so that repeated collectives on the same
// buffers register nothing. The scratch arena is one huge-page-advised (over shm: peer-mappable), pre-faulted host
// allocation that only grows (first touch of a 4 KiB page costs 12–20 µs on the VMs we run on, so nothing is allocated per call).
// Not thread-safe: owned and used by the communicator's worker thread.
// Invalidation: an entry whose region reports !still_valid() (verbs pins pages and can tell that the memory was
// freed and reallocated) is dropped and the range registered again; shm and tcp pin nothing, so their entries
// stay valid. Non-goals: detecting frees itself (the verbs backend's cache does, verbs_reg_cache.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace zw::internal {

// A registered buffer: its region and the serialized remote key peers target.
struct RegBuf {
  const transport::MemoryRegion* mr = nullptr;
  const std::vector<std::byte>* key = nullptr;

  std::byte* data() const { return mr->mem().data(); }
  size_t bytes() const { return mr->mem().bytes; }
  // Offset of `p` inside this buffer (p must lie inside).
  size_t offset_of(const void* p) const { return static_cast<size_t>(static_cast<const std::byte*>(p) - data()); }
};

class RegistrationCache {
 public:
  RegistrationCache(transport::Transport& transport, size_t capacity) : transport_(transport), capacity_(capacity) {}
  // A registration that covers `mem` (an existing one containing it, or a new one).
  Result<RegBuf> get(MemRef mem);

 private:
  struct Entry {
    std::unique_ptr<transport::MemoryRegion> mr;
    std::vector<std::byte> key;
    uint64_t last_use;
  };
  transport::Transport& transport_;
  size_t capacity_;
  uint64_t clock_ = 0;
  std::vector<std::unique_ptr<Entry>> entries_;
};

class ScratchArena {
 public:
  // `peer_mappable`: allocate with alloc_peer_writable's arenas (see there).
  ScratchArena(transport::Transport& transport, bool peer_mappable)
      : transport_(transport), peer_mappable_(peer_mappable) {}
  ~ScratchArena();
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  // A registered host buffer of at least `bytes`; growing it invalidates earlier RegBufs.
  Result<RegBuf> get(size_t bytes);
  size_t capacity() const { return bytes_; }

 private:
  transport::Transport& transport_;
  const bool peer_mappable_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  std::unique_ptr<transport::MemoryRegion> mr_;
  std::vector<std::byte> key_;
};

// Host memory advised for huge pages and pre-faulted; freed with free_huge.
Result<void*> alloc_huge(size_t bytes);
void free_huge(void* p, size_t bytes);

// Memory that peers write into (scratch slots, eager inboxes). With `peer_mappable` (the shm transport) it is a
// zw::mem_alloc arena, pre-faulted too, which shm peers map and copy into with memcpy instead of
// process_vm_writev (3x the copy rate for cache-resident slices on the VMs we measure); otherwise alloc_huge.
// Freed with free_peer_writable and the same flag.
Result<void*> alloc_peer_writable(size_t bytes, bool peer_mappable);
void free_peer_writable(void* p, size_t bytes, bool peer_mappable);

}  // namespace zw::internal
