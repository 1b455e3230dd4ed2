// The verbs registration cache: user buffers are registered (pinned, ibv_reg_mr) once and the MR is reused by
// every later register_memory() of a range inside it; LRU eviction keeps at most ZW_IB_REG_CACHE_ENTRIES
// registrations and ZW_IB_REG_CACHE_BYTES registered bytes for reuse.
//
// Invalidation. A cached MR pins the page frames that backed its addresses at registration. If the application
// frees the buffer and a later allocation reuses the addresses, the MR still points at the old frames: reusing it
// would move bytes into or out of memory nobody sees. munmap/free hooks are not portable (symbol interposition
// misses direct syscalls and static binaries; userfaultfd is blocked by container seccomp defaults), and a
// /proc/self/maps entry cannot tell a fresh anonymous mapping of the same size at the same address from the
// old one. What does tell them apart is the page frame: while the MR exists its frames stay pinned, so they
// cannot back any new mapping; a remapped address therefore always shows a different frame number (or none).
// With MappingCheck::kPagemap the cache records the frame numbers of up to kFrameSamples pages of each
// registration (all pages of registrations up to that size; otherwise evenly spaced samples including the first
// and last page) from /proc/self/pagemap and compares them on every reuse (one pread per sample, about 1 us
// each); a mismatch drops the entry and registers again. Reading frame numbers needs CAP_SYS_ADMIN (root in the
// usual container); without it, kAuto falls back to kTrust (address-only reuse) with one warning naming the
// contract. A remap of only some interior pages between samples of a large registration goes unnoticed.
//
// The cache also knows every live host registration by rkey, so that the receiver of a small write carried
// inline in a ring message (verbs_connection.h) can check the target before copying it in (copy_in).
// Threading: every method may be called from any thread (one mutex for the LRU, one for the rkey table). Handles (VerbsMemoryRegion) keep their
// registration alive after eviction; the MR is deregistered when the last handle and the cache let go.
// Non-goals: on-demand paging (IBV_ACCESS_ON_DEMAND would make invalidation unnecessary on mlx5 but is not on
// rxe), device memory, merging adjacent registrations.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"
#include "transport/verbs/verbs_config.h"
#include "transport/verbs/verbs_memory_region.h"

namespace zw::transport::verbs {

inline constexpr size_t kFrameSamples = 64;  // pages whose frame numbers are recorded per registration

// The page frame numbers behind the sampled pages of [start, start + bytes) (see the header comment), read from
// /proc/self/pagemap; 0 for a page that is not present. Empty when frame numbers are not readable (no
// CAP_SYS_ADMIN: the kernel reports them as 0) or the range is empty.
std::vector<uint64_t> read_page_frames(uintptr_t start, size_t bytes);
// Whether this process can read page frame numbers (what kAuto decides on).
bool page_frames_readable();

class VerbsRegCache final : public RegistrationValidator, public std::enable_shared_from_this<VerbsRegCache> {
 public:
  struct Stats {
    uint64_t hits = 0;           // register_memory() served by a cached registration
    uint64_t misses = 0;         // ... that registered
    uint64_t evictions = 0;      // entries dropped by the LRU budget
    uint64_t invalidations = 0;  // entries dropped because the memory behind them changed
    size_t entries = 0;          // registrations cached now
    size_t bytes = 0;            // bytes they cover
  };

  // kInvalidArgument when config.check is kPagemap and frame numbers are not readable.
  static Result<std::shared_ptr<VerbsRegCache>> create(std::shared_ptr<VerbsDevice> device,
                                                       const RegCacheConfig& config);

  // A handle on `mem`: from a cached registration containing it (checked), or from a new one (cached).
  Result<std::unique_ptr<MemoryRegion>> register_memory(MemRef mem);
  bool still_valid(const VerbsRegistration& reg) const override;
  // The last registration copy_in() validated for one caller (a connection, under its lock): while no
  // registration was destroyed since (registrations_destroyed() unchanged) it is still live, so a write inside
  // it needs no lookup (no lock, no hash, no weak_ptr).
  struct LiveHint {
    uint32_t rkey = 0;
    uintptr_t start = 0;
    size_t bytes = 0;  // 0: no hint
    uint64_t destroyed = 0;
  };
  // Copies `bytes` to `address` when [address, address + bytes) lies inside a live host registration with
  // `rkey` made by this cache (the receiving side of small writes carried inline); false otherwise. `hint`
  // (may be null) is checked first and updated.
  // Inline while the hint holds (the receive path of every small write); copy_in_slow() looks the rkey up.
  bool copy_in(uint32_t rkey, uint64_t address, const void* src, size_t bytes, LiveHint* hint = nullptr) const {
    // The count is read before the lookup: a registration destroyed after it changes it, one destroyed before
    // it is not found by copy_in_slow() (its weak_ptr expired before its destructor ran).
    const uint64_t destroyed = registrations_destroyed();
    if (hint && hint->bytes != 0 && hint->rkey == rkey && hint->destroyed == destroyed && address >= hint->start &&
        bytes <= hint->bytes && address - hint->start <= hint->bytes - bytes) {
      copy_small(reinterpret_cast<void*>(address), src, bytes);
      return true;
    }
    return copy_in_slow(rkey, address, src, bytes, hint, destroyed);
  }
  Stats stats() const;
  MappingCheck check() const { return check_; }

 private:
  VerbsRegCache(std::shared_ptr<VerbsDevice> device, const RegCacheConfig& config, MappingCheck check)
      : device_(std::move(device)), config_(config), check_(check) {}
  void evict_locked();
  bool copy_in_slow(uint32_t rkey, uint64_t address, const void* src, size_t bytes, LiveHint* hint,
                    uint64_t destroyed) const;

  const std::shared_ptr<VerbsDevice> device_;          // where registrations are made
  const RegCacheConfig config_;                        // budgets
  const MappingCheck check_;                           // kPagemap or kTrust (kAuto resolved)
  mutable std::mutex mu_;                              // guards lru_ and stats_
  std::list<std::shared_ptr<VerbsRegistration>> lru_;  // front = most recently used
  Stats stats_;                                        // counters (entries/bytes kept current)
  mutable std::mutex live_mu_;  // guards live_ and prune_at_ (not mu_: receives must not wait for an ibv_reg_mr)
  std::unordered_map<uint32_t, std::weak_ptr<VerbsRegistration>> live_;  // every registration by rkey
  size_t prune_at_ = 64;  // live_ size that triggers dropping expired entries
};

}  // namespace zw::transport::verbs
