// IPC descriptions of local device buffers and the LRU cache of peers' mapped allocations.
#include "transport/cuda_ipc/cuda_ipc_memory_region.h"

#include <cstring>

#include "common/log.h"
#include "transport/cuda_ipc/cuda_ipc_device.h"

namespace zw::transport::cuda_ipc {

Result<IpcBuffer> IpcExporter::describe(const void* ptr) {
  IpcBuffer out;
  if (ptr == nullptr) return out;
  ZW_ASSIGN_OR_RETURN(AllocationRange range, allocation_of(ptr));
  out.buffer_id = range.buffer_id;
  out.base = range.base;
  out.offset = reinterpret_cast<uintptr_t>(ptr) - range.base;
  auto it = handles_.find(range.buffer_id);
  if (it == handles_.end()) {
    if (handles_.size() >= kMaxEntries) handles_.erase(handles_.begin());  // oldest identity: ids only grow
    cudaIpcMemHandle_t handle{};
    ZW_TRY(cuda_status(cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(range.base)),
                       "cudaIpcGetMemHandle for a device buffer of " + std::to_string(range.size) + " bytes"));
    it = handles_.emplace(range.buffer_id, handle).first;
  }
  out.handle = it->second;
  return out;
}

IpcImportCache::~IpcImportCache() {
  for (auto& [key, entry] : entries_) cudaIpcCloseMemHandle(entry.base);
}

std::byte* IpcImportCache::lookup(int owner, uint64_t id) {
  auto it = entries_.find(Key{owner, id});
  if (it == entries_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.base;
}

Result<std::byte*> IpcImportCache::open(int owner, const IpcBuffer& buf) {
  void* base = nullptr;
  cudaError_t err = cudaIpcOpenMemHandle(&base, buf.handle, cudaIpcMemLazyEnablePeerAccess);
  already_mapped_ = err == cudaErrorAlreadyMapped;
  Status st = cuda_status(err, "cudaIpcOpenMemHandle");
  if (!st.ok())
    return st.with_context("mapping a device buffer of rank " + std::to_string(owner) +
                           " (both GPUs must be in one node with peer access, e.g. NVLink or PCIe P2P)");
  ++opens_;
  lru_.push_front(Key{owner, buf.buffer_id});
  entries_.emplace(Key{owner, buf.buffer_id}, Entry{static_cast<std::byte*>(base), lru_.begin(), buf.handle});
  ZW_TRACE(kCuda, "mapped allocation %llu of rank %d (%zu cached)", static_cast<unsigned long long>(buf.buffer_id),
               owner, entries_.size());
  return static_cast<std::byte*>(base);
}

Status IpcImportCache::close(std::map<Key, Entry>::iterator it) {
  lru_.erase(it->second.lru);
  Status st = cuda_status(cudaIpcCloseMemHandle(it->second.base), "cudaIpcCloseMemHandle");
  entries_.erase(it);
  return st;
}

Status IpcImportCache::evict_oldest() { return close(entries_.find(lru_.back())); }

bool IpcImportCache::has_handle(int owner, const cudaIpcMemHandle_t& handle) const {
  for (const auto& [key, entry] : entries_)
    if (key.first == owner && std::memcmp(&entry.handle, &handle, sizeof handle) == 0) return true;
  return false;
}

Status IpcImportCache::close_owner(int owner) {
  Status first;
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->first.first == owner) {
      Status st = close(it);
      if (first.ok()) first = st;
    }
    it = next;
  }
  return first;
}

Status IpcImportCache::close_handle(int owner, const cudaIpcMemHandle_t& handle) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->first.first == owner && std::memcmp(&it->second.handle, &handle, sizeof handle) == 0) return close(it);
  return Status();
}

}  // namespace zw::transport::cuda_ipc
