// Memory registration of the shm transport. Host memory needs no pinning here: a writer copies into it with
// process_vm_writev (or memcpy when both ranks are threads of one process), so a region is just its bounds,
// and its remote key says which process and which bytes: {pid, address, length}.
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

// What a writer needs to reach a registered region. Serialized as 24 little-endian bytes.
struct ShmRemoteKey {
  static constexpr size_t kBytes = 24;
  int32_t pid = 0;       // process that owns the region
  uint64_t address = 0;  // first byte, in that process
  uint64_t length = 0;   // bytes in the region

  std::vector<std::byte> serialize() const;
  // kInvalidArgument when `bytes` is not a key made by serialize().
  static Result<ShmRemoteKey> parse(std::span<const std::byte> bytes);
};

// A registered host buffer. Immutable after construction; safe to share between threads.
class ShmMemoryRegion final : public MemoryRegion {
 public:
  explicit ShmMemoryRegion(MemRef mem);
  std::vector<std::byte> remote_key() const override;

 private:
  int32_t pid_;  // getpid() at registration
};

// Validates `mem` (host memory only; null only when empty) and registers it.
Result<std::unique_ptr<MemoryRegion>> register_shm_memory(MemRef mem);

}  // namespace zw::transport
