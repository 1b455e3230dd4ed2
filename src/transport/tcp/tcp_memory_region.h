// Registered memory of the tcp transport: the region table the progress thread consults for every incoming
// write, the MemoryRegion handle that removes its entry on destruction, and the remote key format.
//
// The remote key is {magic, region id, length, base address, owner rank}; a writer checks its offsets against
// the length before sending and the receiver checks the region id and bounds again before receiving into it.
// Non-goals: device memory (kUnsupported), pinning or huge-page advice (TCP copies through the kernel).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"

namespace zw::transport::tcp {

inline constexpr uint32_t kRemoteKeyMagic = 0x4b54575a;  // "ZWTK"

struct RemoteKey {
  uint32_t magic = kRemoteKeyMagic;  // identifies a tcp key
  uint32_t region_id = 0;            // id in the owner's RegionTable
  uint64_t length = 0;               // bytes of the region
  uint64_t base = 0;                 // the region's address in the owner (diagnostics only)
  int32_t rank = -1;                 // owner rank
  uint32_t reserved = 0;             // zero
};
static_assert(sizeof(RemoteKey) == 32);

std::vector<std::byte> encode_key(const RemoteKey& key);
// Parses a key produced by encode_key; a usage error says why a foreign or truncated key was refused.
Result<RemoteKey> decode_key(std::span<const std::byte> bytes);

// Regions that peers may write into, by id. Thread-safe: registration happens on user threads while the
// progress thread looks ids up for every incoming write frame (one uncontended mutex per frame).
class RegionTable {
 public:
  uint32_t add(const MemRef& mem);
  void remove(uint32_t id);
  // The region with this id, or false when none is registered.
  bool lookup(uint32_t id, MemRef* out) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, MemRef> regions_;  // guarded by mu_
  uint32_t next_id_ = 1;                          // guarded by mu_; ids are never reused
};

// Contract: a peer write into the region must have completed (its Notify was polled) before the region is
// destroyed; destroying it earlier makes later frames for it a remote access error at the receiver.
class TcpMemoryRegion final : public MemoryRegion {
 public:
  TcpMemoryRegion(MemRef mem, int rank, std::shared_ptr<RegionTable> table);
  ~TcpMemoryRegion() override;
  std::vector<std::byte> remote_key() const override;

 private:
  int rank_;
  uint32_t id_;
  std::shared_ptr<RegionTable> table_;
};

}  // namespace zw::transport::tcp
