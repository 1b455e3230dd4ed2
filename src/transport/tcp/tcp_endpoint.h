// The tcp transport's endpoint: PeerState, everything the transport knows about one peer (its sockets, send
// queues, incoming messages, sticky error), and TcpEndpoint, the handle the caller drives.
//
// A write is split into stripes (one frame each) over the pair's connections when it is large; small writes
// and control messages travel on connection 0 and so keep their order; so does an announced write (write and
// announcement in one frame, Endpoint::write_announced), which is never striped. The receiver recv()s each
// stripe into the registered destination and delivers Notify once every stripe of the write arrived.
// Non-goals: reconnecting after an error (errors are sticky), flow control beyond the kernel's.
#pragma once

#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/tcp_wire.h"
#include "transport/transport.h"

namespace zw::transport::tcp {

class Engine;

// FIFO of messages that grows by doubling and then reuses its slots (no allocation per message).
class MessageRing {
 public:
  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  Message& push_slot();
  void pop(Message* out);
  void clear() { head_ = count_ = 0; }

 private:
  std::vector<Message> slots_;
  size_t head_ = 0;
  size_t count_ = 0;
};

// Threading: members are grouped by who may touch them. The endpoint thread posts through the Engine: it
// writes a frame itself when the connection's SendLane is idle, otherwise queues it there (lane lock) and
// hands write records to the progress thread under Engine::post_mu_. It reads messages under mu_. The
// progress thread owns the connections (opening, closing) and flushes the lanes' queues; frames are read by
// whoever holds the connection's RecvLane lock: the progress thread, or a caller waiting for activity.
// Lock order: a lane's mu, then Engine::post_mu_; a RecvLane's mu, then mu_.
class PeerState final : public FrameSink {
 public:
  PeerState(Engine* engine, int rank, std::string address, int nconns);

  int rank() const { return rank_; }
  const std::string& address() const { return address_; }
  int nconns() const { return nconns_; }

  // --- endpoint thread ---
  Status wait_connected(Deadline deadline);
  Result<bool> poll(Message* out);
  Status error() const;
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The endpoint is gone: drop queued messages and stop accepting new ones.
  void close();
  // Waits until the progress thread closed the peer's sockets and dropped its queued requests, so that no
  // caller buffer is touched any more.
  void wait_released();
  uint64_t writes_posted() const { return writes_posted_.load(std::memory_order_acquire); }
  uint64_t writes_completed() const { return writes_completed_.load(std::memory_order_acquire); }

  // --- progress thread ---
  Result<std::byte*> write_target(const FrameHeader& header) override;
  void frame_received(const FrameHeader& header, const Message* control) override;
  void request_sent(SendReq* req) override;
  // Records the sticky error (first one wins) and wakes every waiter.
  void set_error(Status status);
  // Connection `index` is up: inline sends and waiting callers may use it from now on.
  void connection_up(int index, Conn* c);
  // Before connection `index` is closed: no inline send or waiting caller uses it any more. With `goodbye`,
  // tells the peer first, unless a frame is half sent.
  void lane_down(int index, bool goodbye);
  // Reads what connection `index` holds, under its RecvLane lock; a read error a caller met earlier is returned
  // instead. *between: the stream ended between two frames (Conn::ended_between_frames).
  Status read_locked(int index, bool* between);

  // --- a caller waiting for activity (any thread) ---
  // Reads every connection whose RecvLane is free, as the progress thread would; sets *mid_frame when one of them
  // stopped inside a frame. True when a read failed: the error is left in the lane for the progress thread (see
  // Engine::read_inline).
  bool read_inline(bool* mid_frame);
  // Whether a connection is inside a large frame (Conn::streaming), or being read by another thread right now.
  bool streaming();
  // Appends a POLLIN entry for every connection that is up and has no read error left in its lane.
  void add_poll_fds(std::vector<pollfd>* fds);
  // Calls f(conn) under connection `index`'s RecvLane lock if the connection is up.
  template <typename F>
  void with_conn(int index, const F& f) {
    RecvLane& rx = rx_lanes_[static_cast<size_t>(index)];
    std::lock_guard<std::mutex> lock(rx.mu);
    if (rx.conn != nullptr) f(rx.conn);
  }
  // Completes the in-flight writes at the front that are done, in posting order.
  void complete_done();
  // The sockets are closed and every request dropped (wakes wait_released()).
  void mark_released();
  // Hands every queued request (lane locks) and in-flight record back to the engine's pools.
  void release_all();
  std::unique_ptr<Conn>& conn(int index) { return conns_[static_cast<size_t>(index)]; }
  SendLane& lane(int index) { return lanes_[static_cast<size_t>(index)]; }

 private:
  friend class Engine;       // posts and sends inline, takes posted records into in_flight_
  friend class TcpEndpoint;  // write sequence and stripe rotation
  struct Assembly {
    uint64_t seq;   // write_seq of a striped write
    uint32_t left;  // stripes still missing
  };
  void deliver(const FrameHeader& header, const Message* control);

  Engine* const engine_;
  const int rank_;
  const std::string address_;
  const int nconns_;

  // Endpoint thread only.
  uint64_t write_seq_ = 0;
  uint32_t next_stripe_conn_ = 0;
  std::atomic<uint64_t> writes_posted_{0};
  std::atomic<uint64_t> writes_completed_{0};  // by the progress thread, or inline when nothing was in flight

  std::unique_ptr<SendLane[]> lanes_;     // by connection index; each guarded by its own mu
  std::unique_ptr<RecvLane[]> rx_lanes_;  // by connection index; each guarded by its own mu

  // Guarded by Engine::post_mu_.
  Fifo<WriteRecord> posted_records_;  // posted writes not yet taken by the progress thread, in order
  bool dirty_ = false;                // on the engine's list of peers with posted records or queued frames

  // Progress thread only.
  std::vector<std::unique_ptr<Conn>> conns_;  // by connection index; null until connected/accepted
  Fifo<WriteRecord> in_flight_;               // posted writes in posting order
  int conns_ended_ = 0;                       // connections the peer closed cleanly
  bool goodbye_seen_ = false;                 // one of them said goodbye (the peer closed on purpose)

  // Guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable connected_cv_;
  MessageRing inbox_;
  std::vector<Assembly> assembling_;  // striped incoming writes with stripes missing
  Status error_;
  bool error_reported_ = false;  // poll() returned the error once (it then stops counting as activity)
  bool closed_ = false;
  bool released_ = false;
  int conns_up_ = 0;
  std::atomic<size_t> inbox_count_{0};  // inbox_.size(), readable without mu_
  std::atomic<bool> failed_{false};     // error_ is set
  std::atomic<bool> rx_failed_{false};  // a caller left a read error in a RecvLane (Engine::read_inline)
};

// Contract: driven by one thread at a time (see transport.h). Local completion (writes_completed) means the
// kernel holds the bytes, not that the peer has them; the peer's Notify says that. A write or send whose frame
// the kernel takes whole at once is written by the calling thread (see tcp_engine.h), and such a write with no
// other write in flight is complete when write() returns. Destroying the endpoint
// sends a goodbye after whatever is queued in the kernel, closes the pair's sockets, drops writes not yet
// handed to the kernel, and returns once the progress thread no longer touches the caller's buffers. The peer
// receives everything sent before the goodbye, then fails with kConnectionLost ("closed on purpose").
class TcpEndpoint final : public Endpoint {
 public:
  TcpEndpoint(std::shared_ptr<Engine> engine, std::shared_ptr<PeerState> peer);
  ~TcpEndpoint() override;

  Status wait_connected(Deadline deadline) override;
  Status write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
               size_t remote_offset, size_t bytes, uint64_t notify) override;
  Status send(std::span<const std::byte> payload) override;
  // One kWriteAnnounced frame on connection 0 (see tcp_wire.h), inline or queued like write(). Never striped,
  // whatever its size: stripes on other sockets could arrive after the announcement (and after later control
  // messages), and the contract is Notify, then the announcement, in posting order with connection 0's frames.
  Status write_announced(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
                         size_t remote_offset, size_t bytes, uint64_t notify,
                         std::span<const std::byte> announce) override;
  Result<bool> poll(Message* out) override;
  uint64_t writes_posted() const override { return peer_->writes_posted(); }
  uint64_t writes_completed() const override { return peer_->writes_completed(); }
  Status error() const override { return peer_->error(); }

  static constexpr size_t kStripeThreshold = 256 << 10;  // writes at least this large are striped
  static constexpr size_t kMinStripe = 128 << 10;        // smallest stripe
  static constexpr size_t kMaxWriteBytes = size_t{1} << 40;

 private:
  Status check_write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
                     size_t remote_offset, size_t bytes, uint32_t* region_id) const;
  Status check_control(size_t bytes) const;
  // Number of stripes (and their size) a write of `bytes` is split into.
  size_t stripe_plan(size_t bytes, size_t* chunk) const;

  std::shared_ptr<Engine> engine_;
  std::shared_ptr<PeerState> peer_;
};

}  // namespace zw::transport::tcp
