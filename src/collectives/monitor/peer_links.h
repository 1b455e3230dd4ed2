// collectives/monitor/peer_links.h — per-peer link counters of a communicator: bytes this rank wrote to each peer
// and received from it, and how long it was blocked waiting for data from it (only waits that found the data
// missing are timed, so data already there costs no clock read).
//
// Threading: one writer, the communicator's rendezvous (run by the run-token holder, one at a time). It keeps the
// running totals beside its own per-peer state, which every transfer touches anyway, and stores them here: stores
// only, so that a transfer never waits for a counter's line, which went cold while the rank waited for its peers.
// Read by any thread. Non-goals: control messages, per-chunk latency distributions.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace zw::internal::monitor {

class PeerLinks {
 public:
  struct Link {
    std::atomic<uint64_t> sent_bytes{0};      // payload written to the peer
    std::atomic<uint64_t> received_bytes{0};  // payload received from the peer
    std::atomic<uint64_t> wait_ns{0};         // time blocked waiting for the peer's data
    std::atomic<uint64_t> waits{0};           // waits that blocked
  };

  explicit PeerLinks(int size) : size_(size), links_(new Link[static_cast<size_t>(size)]) {}
  int size() const { return size_; }
  const Link& link(int peer) const { return links_[static_cast<size_t>(peer)]; }
  // The writer's view: the counters, indexed by peer.
  Link* counters() { return links_.get(); }

 private:
  int size_;
  std::unique_ptr<Link[]> links_;
};

}  // namespace zw::internal::monitor
