// One shm connection to one peer on the same host: writes copy straight into the peer's registered memory
// (memcpy into a mapping of the peer's zw::mem_alloc arena when the key names one, else process_vm_writev)
// and then post a Notify message; control messages and notifications travel through SPSC rings in the
// receiver's shm segment.
//
// Non-goals: asynchronous writes (a write's copy is done when write() returns), flow control beyond the
// ring size, messages larger than Message::kMaxControl.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <string>

#include "transport/shm/shm_address.h"
#include "transport/shm/shm_peer_arenas.h"
#include "transport/shm/shm_queue.h"
#include "transport/transport.h"

namespace zw::transport {

// Contract: write() and send() return once the bytes are in the peer's memory and the message is in its
// ring; if the ring is full they wait (draining this endpoint's inbound ring meanwhile, so that two ranks
// flooding each other cannot deadlock) up to ZW_TIMEOUT, failing early when the peer's process exits.
// Errors: argument checks (bounds, sizes, malformed keys) are returned without touching the connection;
// data-path failures (peer exited, unreachable memory, timeouts, malformed messages) become the sticky
// error that every later call returns.
// Threading: one thread drives an endpoint (see transport.h); endpoints of one transport may be driven by
// different threads, since each owns its rings' ends.
class ShmEndpoint final : public Endpoint {
 public:
  // `own` is this rank's segment (whose ring from the peer this endpoint consumes); `peer_address` says
  // where the peer's segment is.
  ShmEndpoint(int rank, ShmAddress peer_address, std::shared_ptr<ShmSegment> own);
  ~ShmEndpoint() override;

  // Maps the peer's segment and attaches to it if it exists already; never blocks.
  Status try_attach();

  Status wait_connected(Deadline deadline) override;
  Status write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
               size_t remote_offset, size_t bytes, uint64_t notify) override;
  Status send(std::span<const std::byte> payload) override;
  Result<bool> poll(Message* out) override;
  uint64_t writes_posted() const override { return writes_posted_; }
  uint64_t writes_completed() const override { return writes_completed_; }
  Status error() const override { return error_; }
  // Writes whose bytes went by memcpy into a mapped arena of the peer (the rest: inline or process_vm_writev).
  uint64_t mapped_writes() const { return mapped_writes_; }
  size_t mapped_arenas() const { return arenas_.mapped(); }

 private:
  Status ensure_producer(const char* what);
  Status push(MessageKind kind, uint64_t notify, std::span<const std::byte> payload);
  Status wait_for_slot(MessageKind kind, uint64_t notify, std::span<const std::byte> payload);
  Status copy_to_peer(const std::byte* src, uint64_t dst, size_t bytes, int32_t pid);
  // One thread's share of copy_to_peer: the error, without failing the endpoint (any thread).
  Status copy_to_peer_part(const std::byte* src, uint64_t dst, size_t bytes, int32_t pid) const;
  Status copy_error(int err, uint64_t dst, size_t bytes) const;
  std::byte* mapped_target(const ShmRemoteKey& key);
  Result<bool> pop_ring(Message* out);
  Status drain_into_backlog();
  Status fail(Status status);
  std::string peer_desc() const;  // "rank 3 (pid 1234 on host node1)"

  int rank_;                                  // this rank
  ShmAddress peer_address_;                   // the peer's published address
  std::shared_ptr<ShmSegment> own_;           // our segment (inbound rings)
  std::shared_ptr<ShmSegment> peer_segment_;  // the peer's segment, once mapped
  ShmRingProducer out_;                       // our ring in the peer's segment
  ShmRingConsumer in_;                        // the peer's ring in our segment
  std::deque<Message> backlog_;               // inbound messages drained while a send waited for space
  bool connected_ = false;                    // wait_connected() succeeded
  uint64_t writes_posted_ = 0;                // writes whose copy started
  uint64_t writes_completed_ = 0;             // writes whose copy finished
  uint64_t mapped_writes_ = 0;                // writes copied through arenas_
  ShmPeerArenas arenas_;                      // the peer's arenas mapped here
  bool warned_unmappable_ = false;            // an arena failed to map and we said so at WARN
  Status error_;                              // sticky first data-path error
};

}  // namespace zw::transport
