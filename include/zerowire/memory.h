// Host memory that other ranks on the same host can map: zerowire's counterpart of ncclMemAlloc.
//
// Buffers from mem_alloc are backed by a memfd (whole 2 MiB units, 2 MiB-aligned, huge-page advised,
// pre-faulted). When such a buffer is a collective's destination, the shm transport maps it into the writing
// rank once and copies with a plain memcpy instead of the process_vm_writev system call (one user-space copy,
// no page pinning per call). Ordinary malloc/mmap buffers keep working everywhere; mem_alloc only makes shm
// writes into them faster. Thread-safe.
//
// Non-goals: device memory, cross-host sharing, sub-2 MiB allocations (use malloc for small things), cleanup
// after a crash (the memory is released with the last process that maps it). After fork() the child shares
// the arenas' pages with its parent (MAP_SHARED); free them in one process only.
#pragma once

#include <cstddef>

#include "zerowire/status.h"

namespace zw {

// Allocates at least `bytes` (> 0) of zeroed host memory, rounded up to whole 2 MiB and aligned to 2 MiB.
// Errors: kInvalidArgument for 0 bytes or an impossible size, kOutOfMemory / kSystem when the memfd cannot be
// created, sized or mapped.
Result<void*> mem_alloc(size_t bytes);

// Frees memory from mem_alloc. `ptr` must be the pointer mem_alloc returned; a null, unknown or already
// freed pointer is kInvalidArgument and nothing is freed. Registrations of the memory become invalid (the
// communicators' registration caches notice and register again).
Status mem_free(void* ptr);

}  // namespace zw
