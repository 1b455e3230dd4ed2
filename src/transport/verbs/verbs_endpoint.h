// The verbs transport's endpoint: the handle the caller drives for one peer. It checks arguments (local
// region of this transport, bounds against the local region and the remote key) and hands the work to the
// peer's VerbsConnection (verbs_connection.h), which owns the QP and the protocol.
//
// Non-goals: anything the connection does (posting, completions, credits); striping over several QPs.
#pragma once

#include <memory>
#include <span>

#include "transport/transport.h"
#include "transport/verbs/verbs_connection.h"

namespace zw::transport::verbs {

// Contract: write() and send() return once the work is posted to the QP, waiting (up to ZW_TIMEOUT, while
// consuming this endpoint's inbound messages) only when the peer's receive window or our send queue is full.
// writes_completed() counts writes whose source buffer may be reused (their signaled completion arrived);
// the peer's Notify confirms arrival. Argument errors are returned without touching the connection; data-path
// failures (completion errors, async QP events, timeouts) are the sticky error, which names the peer.
// Destroying the endpoint moves its QP to the error state and waits (at most 1 s) until every posted work
// request is flushed, so caller buffers are not touched afterwards; the peer then fails on its next message.
// Threading: one thread drives an endpoint (see transport.h).
class VerbsEndpoint final : public Endpoint {
 public:
  VerbsEndpoint(std::shared_ptr<const void> keepalive, std::shared_ptr<VerbsConnection> conn,
                const VerbsDevice* device);
  ~VerbsEndpoint() override;

  Status wait_connected(Deadline deadline) override { return conn_->wait_connected(deadline); }
  Status write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
               size_t remote_offset, size_t bytes, uint64_t notify) override;
  Status send(std::span<const std::byte> payload) override;
  Result<bool> poll(Message* out) override { return conn_->poll(out); }
  uint64_t writes_posted() const override { return conn_->writes_posted(); }
  uint64_t writes_completed() const override { return conn_->writes_completed(); }
  Status error() const override { return conn_->error(); }

 private:
  std::shared_ptr<const void> keepalive_;   // the transport's credit words, which the connection reads
  std::shared_ptr<VerbsConnection> conn_;   // the QP and protocol state for this peer
  const VerbsDevice* device_;               // the transport's device: local regions must belong to it
};

}  // namespace zw::transport::verbs
