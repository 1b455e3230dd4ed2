// Registration cache and scratch arena.
#include "collectives/buffers.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "zerowire/memory.h"

namespace zw::internal {

Result<RegBuf> RegistrationCache::get(MemRef mem) {
  ++clock_;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    auto& e = *it;
    const MemRef& m = e->mr->mem();
    if (m.kind == mem.kind && m.contains(mem.ptr, mem.bytes)) {
      if (!e->mr->still_valid()) {  // freed and reallocated since (verbs pins pages): register anew
        entries_.erase(it);
        break;
      }
      e->last_use = clock_;
      return RegBuf{e->mr.get(), &e->key};
    }
  }
  ZW_ASSIGN_OR_RETURN(auto mr, transport_.register_memory(mem));
  if (entries_.size() >= capacity_) {
    auto lru = std::min_element(entries_.begin(), entries_.end(),
                                [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    entries_.erase(lru);
  }
  auto entry = std::make_unique<Entry>();
  entry->key = mr->remote_key();
  entry->mr = std::move(mr);
  entry->last_use = clock_;
  entries_.push_back(std::move(entry));
  return RegBuf{entries_.back()->mr.get(), &entries_.back()->key};
}

Result<void*> alloc_huge(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return system_error("mmap of " + std::to_string(bytes) + " bytes of scratch", errno);
  madvise(p, bytes, MADV_HUGEPAGE);  // advisory: ignored where transparent huge pages are off
  std::memset(p, 0, bytes);          // fault every page in now, not on the data path
  return p;
}

void free_huge(void* p, size_t bytes) {
  if (p) munmap(p, bytes);
}

Result<void*> alloc_peer_writable(size_t bytes, bool peer_mappable) {
  return peer_mappable ? mem_alloc(bytes) : alloc_huge(bytes);
}

void free_peer_writable(void* p, size_t bytes, bool peer_mappable) {
  if (!p) return;
  if (!peer_mappable) return free_huge(p, bytes);
  Status freed = mem_free(p);
  if (!freed.ok()) ZW_WARN(kColl, "freeing a peer-writable buffer: %s", freed.to_string().c_str());
}

ScratchArena::~ScratchArena() {
  mr_.reset();
  free_peer_writable(base_, bytes_, peer_mappable_);
}

Result<RegBuf> ScratchArena::get(size_t bytes) {
  bytes = std::max<size_t>(bytes, 4096);
  if (bytes > bytes_) {
    size_t grown = std::max(bytes, bytes_ * 2);
    grown = (grown + (2u << 20) - 1) & ~size_t((2u << 20) - 1);  // whole 2 MiB huge pages
    mr_.reset();
    free_peer_writable(base_, bytes_, peer_mappable_);
    base_ = nullptr;
    bytes_ = 0;
    ZW_ASSIGN_OR_RETURN(base_, alloc_peer_writable(grown, peer_mappable_));
    bytes_ = grown;
    ZW_ASSIGN_OR_RETURN(mr_, transport_.register_memory(MemRef::host(base_, bytes_)));
    key_ = mr_->remote_key();
  }
  return RegBuf{mr_.get(), &key_};
}

}  // namespace zw::internal
