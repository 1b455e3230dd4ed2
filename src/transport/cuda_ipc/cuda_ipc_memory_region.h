// transport/cuda_ipc/cuda_ipc_memory_region.h — device buffers shared between the processes of one node.
//
// The owner of a buffer describes it as an IpcBuffer: its allocation's identity and base, the buffer's offset in
// it, and a CUDA IPC handle for the allocation. A peer maps the allocation once (cudaIpcOpenMemHandle) and keeps
// it in an LRU cache keyed by (owner rank, allocation identity), so a training loop that reuses its buffers pays
// the mapping once. Allocation identities (CU_POINTER_ATTRIBUTE_BUFFER_ID) are never reused by a process, so a
// buffer freed and reallocated at the same address is mapped afresh, never through a stale mapping. Peers in the
// same process (ranks as threads) use the owner's pointer directly: CUDA IPC cannot open a handle in the process
// that exported it.
//
// Threading: one thread at a time per object (the communicator's issuing thread).
// Non-goals: cuMem*/fabric handles (multi-node NVLink), memory pools, host memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <utility>

#include "zerowire/status.h"

namespace zw::transport::cuda_ipc {

// What a peer needs to reach one buffer; trivially copyable (it travels in the descriptor mailbox).
struct IpcBuffer {
  uint64_t buffer_id = 0;         // allocation identity in the owner process (0: no buffer)
  uint64_t base = 0;              // allocation base in the owner's address space
  uint64_t offset = 0;            // the buffer's first byte, from base
  cudaIpcMemHandle_t handle{};    // IPC handle of the allocation
};

// Describes this process's device buffers, caching the IPC handle of each allocation.
class IpcExporter {
 public:
  // `ptr` must be device memory of this process; ptr == nullptr gives an empty IpcBuffer.
  Result<IpcBuffer> describe(const void* ptr);

 private:
  static constexpr size_t kMaxEntries = 4096;
  std::map<uint64_t, cudaIpcMemHandle_t> handles_;  // by allocation identity
};

// Maps peers' buffers into this process.
class IpcImportCache {
 public:
  explicit IpcImportCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  ~IpcImportCache();
  IpcImportCache(const IpcImportCache&) = delete;
  IpcImportCache& operator=(const IpcImportCache&) = delete;

  // The local address of `buf`'s first byte. `same_process`: the owner is this process (use its pointer).
  // Before evicting a mapping, `quiesce` is called so that no kernel still uses it.
  template <class Quiesce>
  Result<std::byte*> map(int owner, const IpcBuffer& buf, bool same_process, Quiesce&& quiesce) {
    if (buf.buffer_id == 0) return static_cast<std::byte*>(nullptr);
    if (same_process) return reinterpret_cast<std::byte*>(buf.base + buf.offset);
    if (auto hit = lookup(owner, buf.buffer_id)) return hit + buf.offset;
    // A new allocation of the owner may be the memory of one it freed, with the same IPC handle: CUDA refuses to
    // map it twice (cudaErrorAlreadyMapped), so the stale mapping goes first.
    if (entries_.size() >= capacity_ || has_handle(owner, buf.handle)) {
      ZW_TRY(quiesce());
      if (has_handle(owner, buf.handle)) ZW_TRY(close_handle(owner, buf.handle));
      if (entries_.size() >= capacity_) ZW_TRY(evict_oldest());
    }
    auto base = open(owner, buf);
    if (!base.ok() && already_mapped_) {  // an identical mapping under an older identity: drop the owner's, retry
      ZW_TRY(quiesce());
      ZW_TRY(close_owner(owner));
      base = open(owner, buf);
    }
    if (!base.ok()) return base.status();
    return base.value() + buf.offset;
  }
  size_t size() const { return entries_.size(); }
  uint64_t opens() const { return opens_; }  // cudaIpcOpenMemHandle calls so far

 private:
  using Key = std::pair<int, uint64_t>;  // (owner rank, allocation identity)
  struct Entry {
    std::byte* base;                       // local mapping of the allocation
    std::list<Key>::iterator lru;          // position in lru_ (front = most recent)
    cudaIpcMemHandle_t handle;             // what it was opened from
  };
  bool has_handle(int owner, const cudaIpcMemHandle_t& handle) const;
  Status close_handle(int owner, const cudaIpcMemHandle_t& handle);
  Status close(std::map<Key, Entry>::iterator it);
  Status close_owner(int owner);
  std::byte* lookup(int owner, uint64_t id);
  Result<std::byte*> open(int owner, const IpcBuffer& buf);
  Status evict_oldest();

  size_t capacity_;
  std::map<Key, Entry> entries_;
  std::list<Key> lru_;
  uint64_t opens_ = 0;
  bool already_mapped_ = false;  // the last open() failed with cudaErrorAlreadyMapped
};

}  // namespace zw::transport::cuda_ipc
