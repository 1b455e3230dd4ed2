// collectives/monitor/peer_links.h — per-peer link counters of a communicator: bytes this rank wrote to each peer
// and received from it, and how long it was blocked waiting for data from it (only waits that found the data
// missing are timed, so data already there costs no clock read).
//
// Threading: written by the rendezvous' user (the communicator's run-token holder, one at a time) with relaxed loads
// and stores; read by any thread. Non-goals: control messages, per-chunk latency distributions.
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

  void sent(int peer, uint64_t bytes) { bump(links_[static_cast<size_t>(peer)].sent_bytes, bytes); }
  // `blocked_ns` 0: the data was there (not counted as a wait).
  void received(int peer, uint64_t bytes, uint64_t blocked_ns) {
    Link& l = links_[static_cast<size_t>(peer)];
    bump(l.received_bytes, bytes);
    if (blocked_ns == 0) return;
    bump(l.wait_ns, blocked_ns);
    bump(l.waits, 1);
  }

 private:
  static void bump(std::atomic<uint64_t>& a, uint64_t by) {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  int size_;
  std::unique_ptr<Link[]> links_;
};

}  // namespace zw::internal::monitor
