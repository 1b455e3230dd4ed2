// Registered memory of the verbs transport: the handle callers hold (VerbsMemoryRegion) over a shared pinned
// registration (VerbsRegistration, one ibv_mr), and the remote key a peer needs to RDMA-write into it:
// {magic, rkey, address, length}.
//
// Several handles may share one registration (the registration cache, verbs_reg_cache.h, hands out a handle
// for any range inside a cached registration); the MR is deregistered when the last handle and the cache let go.
// Device (CUDA) memory is registered by verbs_gpudirect.h into the same VerbsRegistration.
// Non-goals: on-demand paging, memory windows.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "transport/transport.h"
#include "transport/verbs/verbs_device.h"

namespace zw::transport::verbs {

// What a writer needs to reach a registered region. Serialized as 24 little-endian bytes; the magic word says
// whether the region is host memory (which small writes may reach through the owner's CPU, see
// verbs_connection.h) or device memory.
struct VerbsRemoteKey {
  static constexpr size_t kBytes = 24;
  uint32_t rkey = 0;     // the region's rkey
  uint64_t address = 0;  // first byte, in the owner's address space
  uint64_t length = 0;   // bytes in the region
  bool device = false;   // CUDA device memory (never written by the owner's CPU)

  static constexpr uint32_t kKeyMagic = 0x4b56575a;        // "ZWVK": host memory
  static constexpr uint32_t kDeviceKeyMagic = 0x4456575a;  // "ZWVD": device memory

  std::vector<std::byte> serialize() const;
  // kInvalidArgument when `bytes` is not a key made by serialize().
  static Result<VerbsRemoteKey> parse(std::span<const std::byte> bytes);
  // parse() without the Result (the write path): false when `bytes` is not a key; parse() then says why.
  static bool decode(std::span<const std::byte> bytes, VerbsRemoteKey* key) {
    uint32_t magic = 0;
    if (bytes.size() == kBytes) std::memcpy(&magic, bytes.data(), 4);
    if (magic != kKeyMagic && magic != kDeviceKeyMagic) return false;
    key->device = magic == kDeviceKeyMagic;
    std::memcpy(&key->rkey, bytes.data() + 4, 4);
    std::memcpy(&key->address, bytes.data() + 8, 8);
    std::memcpy(&key->length, bytes.data() + 16, 8);
    return true;
  }
};

// memcpy for the few bytes of a small write or message: 8..16 bytes as two (overlapping) 8-byte moves, no library
// call (under emulation, as on the Soft-RoCE guest, every call and return costs a lookup); others by memcpy.
inline void copy_small(void* dst, const void* src, size_t n) {
  if (n >= 8 && n <= 16) {
    uint64_t a, b;
    std::memcpy(&a, src, 8);
    std::memcpy(&b, static_cast<const std::byte*>(src) + n - 8, 8);
    std::memcpy(dst, &a, 8);
    std::memcpy(static_cast<std::byte*>(dst) + n - 8, &b, 8);
  } else {
    std::memcpy(dst, src, n);
  }
}

// One ibv_mr over [start, start + bytes) with the page frames pinned at registration (for the cache's check).
struct VerbsRegistration {
  VerbsRegistration(std::shared_ptr<VerbsDevice> device, ibv_mr* mr, uintptr_t start, size_t bytes);
  ~VerbsRegistration();
  VerbsRegistration(const VerbsRegistration&) = delete;
  VerbsRegistration& operator=(const VerbsRegistration&) = delete;

  std::shared_ptr<VerbsDevice> device;  // keeps the protection domain alive
  ibv_mr* mr;                           // owned; null for an empty registration
  uintptr_t start;                      // first byte registered
  size_t bytes;                         // bytes registered
  std::vector<uint64_t> frames;         // page frame numbers sampled at registration (empty: not checked)
};

// How many VerbsRegistrations were destroyed so far in this process (incremented, release, before the MR is
// deregistered): a range validated while this count was c is still registered while the count is still c.
// Inline: the receive path of every small write reads it.
namespace detail {
extern std::atomic<uint64_t> g_registrations_destroyed;
}  // namespace detail
inline uint64_t registrations_destroyed() { return detail::g_registrations_destroyed.load(std::memory_order_acquire); }

// Answers whether a registration still describes the memory at its addresses (the cache's check).
class RegistrationValidator {
 public:
  virtual ~RegistrationValidator() = default;
  virtual bool still_valid(const VerbsRegistration& reg) const = 0;
};

// A handle on a registered host range. Immutable after construction; safe to share between threads. Contract:
// peers' writes into it must have completed (their Notify polled) before the registration goes; a later write
// fails at the writer with a remote access error.
class VerbsMemoryRegion final : public MemoryRegion {
 public:
  VerbsMemoryRegion(MemRef mem, std::shared_ptr<VerbsRegistration> reg,
                    std::shared_ptr<const RegistrationValidator> validator);
  std::vector<std::byte> remote_key() const override;
  bool still_valid() const override { return !validator_ || validator_->still_valid(*reg_); }

  uint32_t lkey() const { return reg_->mr ? reg_->mr->lkey : 0; }
  const VerbsDevice* device() const { return reg_->device.get(); }
  const VerbsRegistration& registration() const { return *reg_; }

 private:
  std::shared_ptr<VerbsRegistration> reg_;                // the shared MR
  std::shared_ptr<const RegistrationValidator> validator_;  // null: always valid
};

// Validates `mem` (host memory only; null only when empty) and registers exactly it for local and remote
// write/read (no cache).
Result<std::shared_ptr<VerbsRegistration>> register_verbs_range(const std::shared_ptr<VerbsDevice>& device, MemRef mem);

}  // namespace zw::transport::verbs
