// IPC descriptions of local device buffers and the LRU cache of peers' mapped allocations.
#include "transport/cuda_ipc/cuda_ipc_memory_region.h"

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
  Status st = cuda_status(cudaIpcOpenMemHandle(&base, buf.handle, cudaIpcMemLazyEnablePeerAccess),
                          "cudaIpcOpenMemHandle");
  if (!st.ok())
    return st.with_context("mapping a device buffer of rank " + std::to_string(owner) +
                           " (both GPUs must be in one node with peer access, e.g. NVLink or PCIe P2P)");
  ++opens_;
  lru_.push_front(Key{owner, buf.buffer_id});
  entries_.emplace(Key{owner, buf.buffer_id}, Entry{static_cast<std::byte*>(base), lru_.begin()});
  ZW_TRACE(kCuda, "mapped allocation %llu of rank %d (%zu cached)", static_cast<unsigned long long>(buf.buffer_id),
               owner, entries_.size());
  return static_cast<std::byte*>(base);
}

Status IpcImportCache::evict_oldest() {
  Key key = lru_.back();
  lru_.pop_back();
  auto it = entries_.find(key);
  Status st = cuda_status(cudaIpcCloseMemHandle(it->second.base), "cudaIpcCloseMemHandle");
  entries_.erase(it);
  return st;
}

}  // namespace zw::transport::cuda_ipc
