// The shared-memory transport: all ranks on one host (and in one pid namespace). Each rank owns one POSIX
// shm segment of inbound message rings (shm_queue.h); writes copy straight into the peer's registered memory
// with process_vm_writev, so no bytes are staged and the segment stays small.
//
// Lifecycle: listen() creates and pre-faults the segment and returns an address naming it, the pid and the
// host; connect() parses a peer's address (and attaches to its segment if it exists already);
// Endpoint::wait_connected() finishes attaching. Once every other rank has attached, the segment's name is
// unlinked, so a crash afterwards leaves nothing in /dev/shm.
// Non-goals: ranks on other hosts (the tcp transport), device memory (cuda_ipc), one-sided progress (the
// writer's CPU does the copy).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/shm/shm_address.h"
#include "transport/shm/shm_queue.h"
#include "transport/transport.h"

namespace zw::transport {

// Contract: listen() before connect(); one connect() per peer rank. Endpoints and regions may outlive the
// transport (they share the segment mapping).
// Threading: methods are called from one thread (the communicator's worker, or a test's rank thread);
// wait_for_activity() must be called from the thread that polls this rank's endpoints.
class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const TransportOptions& options);

  const char* name() const override { return "shm"; }
  const Caps& caps() const override { return caps_; }
  Result<std::string> listen() override;
  Result<std::unique_ptr<Endpoint>> connect(int peer_rank, const std::string& address) override;
  Result<std::unique_ptr<MemoryRegion>> register_memory(MemRef mem) override;
  void wait_for_activity(std::chrono::microseconds timeout) override;
  uint64_t last_idle_ns() const override { return last_idle_ns_; }
  bool peer_known_dead(int peer_rank, std::string* why) override;

 private:
  Status check_same_host(int peer_rank, const ShmAddress& address) const;

  TransportOptions options_;                      // rank, world size, job id
  Caps caps_;                                     // what this backend can do
  std::shared_ptr<ShmSegment> segment_;           // our inbound rings; created by listen()
  uint64_t last_idle_ns_ = 0;                     // what the last wait() returned (last_idle_ns)
  std::string address_;                           // what listen() returned
  std::vector<std::optional<ShmAddress>> peers_;  // addresses given to connect(), by rank
};

Result<std::unique_ptr<Transport>> create_shm_transport(const TransportOptions& options);

}  // namespace zw::transport
