// Registered memory of the verbs transport: host buffers pinned with ibv_reg_mr, and the remote key a peer
// needs to RDMA-write into them: {magic, rkey, address, length}.
//
// Non-goals: device memory (kUnsupported for now; GPUDirect RDMA through dma-buf / nvidia-peermem is the next
// step), on-demand paging, memory windows, registration caches.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "transport/transport.h"
#include "transport/verbs/verbs_device.h"

namespace zw::transport::verbs {

// What a writer needs to reach a registered region. Serialized as 24 little-endian bytes.
struct VerbsRemoteKey {
  static constexpr size_t kBytes = 24;
  uint32_t rkey = 0;     // the region's rkey
  uint64_t address = 0;  // first byte, in the owner's address space
  uint64_t length = 0;   // bytes in the region

  std::vector<std::byte> serialize() const;
  // kInvalidArgument when `bytes` is not a key made by serialize().
  static Result<VerbsRemoteKey> parse(std::span<const std::byte> bytes);
};

// A registered host buffer. Immutable after construction; safe to share between threads. Contract: peers'
// writes into it must have completed (their Notify polled) before it is destroyed; a later write fails at the
// writer with a remote access error.
class VerbsMemoryRegion final : public MemoryRegion {
 public:
  VerbsMemoryRegion(MemRef mem, std::shared_ptr<VerbsDevice> device, ibv_mr* mr);
  ~VerbsMemoryRegion() override;
  std::vector<std::byte> remote_key() const override;

  uint32_t lkey() const { return mr_ ? mr_->lkey : 0; }
  const VerbsDevice* device() const { return device_.get(); }

 private:
  std::shared_ptr<VerbsDevice> device_;  // keeps the protection domain alive
  ibv_mr* mr_;                           // null for an empty region
};

// Validates `mem` (host memory only; null only when empty) and registers it for local and remote write.
Result<std::unique_ptr<MemoryRegion>> register_verbs_memory(const std::shared_ptr<VerbsDevice>& device, MemRef mem);

}  // namespace zw::transport::verbs
