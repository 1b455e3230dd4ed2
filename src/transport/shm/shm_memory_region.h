// Memory registration of the shm transport. Host memory needs no pinning here: a writer copies into it with
// process_vm_writev (or memcpy when both ranks are threads of one process), so a region is just its bounds,
// and its remote key says which process and which bytes: {pid, address, length}. A region that lies inside a
// zw::mem_alloc arena (shm_arena.h) also names the arena {memfd, id, length, offset}, so that a writer can map
// the arena once and copy with memcpy (shm_peer_arenas.h).
//
// Non-goals: device memory (the cuda_ipc transport handles it), access control beyond the kernel's
// same-user ptrace check, detecting writes into a region that was deregistered meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "transport/transport.h"

namespace zw::transport {

// What a writer needs to reach a registered region. Serialized as 24 little-endian bytes, or 56 when the
// region lies inside an arena (another magic); parse() accepts both.
struct ShmRemoteKey {
  static constexpr size_t kBytes = 24;       // plain key
  static constexpr size_t kArenaBytes = 56;  // key with the arena fields
  int32_t pid = 0;                           // process that owns the region
  uint64_t address = 0;                      // first byte, in that process
  uint64_t length = 0;                       // bytes in the region
  int32_t memfd = -1;                        // arena keys: the arena's memfd in that process
  uint64_t arena_id = 0;                     // arena keys: the arena's id in that process; 0: not in an arena
  uint64_t arena_length = 0;                 // arena keys: bytes in the arena
  uint64_t arena_offset = 0;                 // arena keys: offset of `address` inside the arena

  bool has_arena() const { return arena_id != 0; }
  std::vector<std::byte> serialize() const;
  // kInvalidArgument when `bytes` is not a key made by serialize().
  static Result<ShmRemoteKey> parse(std::span<const std::byte> bytes);
};

// A registered host buffer. Immutable after construction; safe to share between threads.
class ShmMemoryRegion final : public MemoryRegion {
 public:
  explicit ShmMemoryRegion(MemRef mem);
  std::vector<std::byte> remote_key() const override;
  // False once the arena the region lay in was freed, or when the range has moved into or out of an arena
  // since registration (so that a registration cache registers it again and peers get a fresh key).
  bool still_valid() const override;
  uint64_t arena_id() const { return arena_id_; }  // 0 when the region is not inside an arena

 private:
  int32_t pid_;              // getpid() at registration
  uint64_t arena_id_ = 0;    // arena containing the region, 0 if none
  int32_t memfd_ = -1;       // that arena's memfd
  uint64_t arena_base_ = 0;  // that arena's first byte
  uint64_t arena_length_ = 0;
};

// Validates `mem` (host memory only; null only when empty) and registers it.
Result<std::unique_ptr<MemoryRegion>> register_shm_memory(MemRef mem);

}  // namespace zw::transport
