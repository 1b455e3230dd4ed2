// The verbs transport's endpoint: the handle the caller drives for one peer. It checks arguments (local
// region of this transport, bounds against the local region and the remote key) and hands the work to the
// peer's VerbsConnections (verbs_connection.h), which own the QPs and the protocol.
//
// Striping (ZW_IB_QPS_PER_CONNECTION = N > 1): a write of at least kMinStripeBytes is cut into N parts of
// whole 4 KiB pages (the last ones possibly empty); part i travels on QP i as WRITE(s) + a {kPart, notify}
// ring message. Every striped write puts exactly one part on every QP, in posting order, so the k-th part received on
// each QP belongs to the same write: the Notify is delivered once every QP delivered its part, i.e. after every
// byte landed (each QP's message follows its own WRITEs and is delivered after its receive completion). Smaller writes, control messages, credits and the hello
// use QP 0 only. A striped Notify may overtake later control messages of QP 0 (transport.h allows it).
// Non-goals: anything the connection does (posting, completions, credits); adaptive striping.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "transport/transport.h"
#include "transport/verbs/verbs_connection.h"

namespace zw::transport::verbs {

inline constexpr size_t kMinStripeBytes = 64 * 1024;  // smaller writes go on QP 0 whole
inline constexpr size_t kStripeAlign = 4096;          // part boundaries fall on page multiples

// Contract: write() and send() return once the work is posted to the QP(s), waiting (up to ZW_TIMEOUT, while
// consuming this endpoint's inbound messages) only when the peer's receive window or our send queue is full.
// writes_completed() counts writes whose source buffer may be reused (every part's signaled completion
// arrived), polling the CQs once itself when some are pending; the peer's Notify confirms arrival. Argument errors are
// returned without touching the connections; data-path failures (completion errors, async QP events, the peer's death,
// timeouts) are the sticky error, which names the peer. Destroying the endpoint moves its QPs to the error state and
// waits (at most 1 s each) until every posted work request is flushed, so caller buffers are not touched afterwards;
// the peer then fails on its next message. Threading: one thread drives an endpoint (see transport.h).
class VerbsEndpoint final : public Endpoint {
 public:
  VerbsEndpoint(std::shared_ptr<const void> keepalive, std::vector<std::shared_ptr<VerbsConnection>> conns,
                const VerbsDevice* device);
  ~VerbsEndpoint() override;

  Status wait_connected(Deadline deadline) override;
  Status write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
               size_t remote_offset, size_t bytes, uint64_t notify) override;
  Status send(std::span<const std::byte> payload) override;
  Result<bool> poll(Message* out) override;
  uint64_t writes_posted() const override { return posted_; }
  uint64_t writes_completed() const override;
  Status error() const override;

 private:
  // Delivers the Notify of the oldest striped write whose every part arrived.
  Result<bool> take_complete_stripe(Message* out);
  Status post_striped(const VerbsMemoryRegion& local, size_t local_offset, const VerbsRemoteKey& key,
                      size_t remote_offset, size_t bytes, uint64_t notify);

  std::shared_ptr<const void> keepalive_;                // the transport's credit words, read by the connections
  std::vector<std::shared_ptr<VerbsConnection>> conns_;  // QP i of this peer; [0] also carries control
  const VerbsDevice* device_;                            // the transport's device: local regions must belong to it
  std::vector<std::deque<uint64_t>> parts_;              // by QP: notify values of parts not yet matched
  uint64_t posted_ = 0;                                  // writes posted on this endpoint
  mutable uint64_t completed_ = 0;                       // writes known complete locally
  // Per pending write of a multi-QP endpoint (one QP completes in order: its own count says it), oldest first,
  // conns_.size() entries: each QP's writes_posted after it (0: not used).
  // Flat, so that a write allocates nothing.
  mutable std::deque<uint64_t> targets_;
};

}  // namespace zw::transport::verbs
