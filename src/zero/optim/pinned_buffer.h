// zero/optim/pinned_buffer.h — large host buffers for the offloaded optimizer state: 2 MiB-aligned anonymous
// mmap, advised MADV_HUGEPAGE and pre-faulted, so the first optimizer step does not pay the VM's first-touch cost
// (12–20 µs per 4 KiB page here, see ARCHITECTURE.md "Memory").
//
// "Pinned": today the pages are only resident (pre-faulted), not locked. When the CUDA backend lands, the GPU path
// registers the buffer with cudaHostRegister (page-locking it for DMA) behind the same type — not done now, and
// this file has no CUDA dependency. Non-goals: mlock (RLIMIT_MEMLOCK is small on most hosts), NUMA placement,
// explicit hugetlbfs pages (transparent huge pages only; if THP is off the buffer still works with 4 KiB pages).
// Threading: a PinnedBuffer is a plain move-only owner; the memory may be used from any thread.
#pragma once

#include <cstddef>

#include "zerowire/status.h"

namespace zw::zero {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }             // bytes requested
  size_t mapped_bytes() const { return mapped_; }   // bytes mapped (size rounded up to 2 MiB)
  bool huge_page_advised() const { return huge_; }  // MADV_HUGEPAGE was accepted
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  friend Result<PinnedBuffer> alloc_pinned_hugepage(size_t bytes);
  void release();

  void* data_ = nullptr;  // 2 MiB-aligned start, or null when empty
  size_t size_ = 0;       // requested bytes
  size_t mapped_ = 0;     // bytes to munmap at data_
  bool huge_ = false;     // MADV_HUGEPAGE succeeded
};

// Maps max(bytes, 1) rounded up to 2 MiB, 2 MiB-aligned, zero-filled and pre-faulted. bytes == 0 gives an empty
// buffer. kOutOfMemory when the mapping fails.
Result<PinnedBuffer> alloc_pinned_hugepage(size_t bytes);

}  // namespace zw::zero
