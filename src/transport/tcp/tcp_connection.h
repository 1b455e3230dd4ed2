// One TCP socket of the tcp transport and its non-blocking framing: the handshake Hello, reading frames
// (headers through a small staging buffer, large payloads recv()d straight into their destination) and
// writing queued frames with sendmsg() gathers of header + caller payload.
//
// Threading: a Conn is owned and driven by the transport's progress thread; its socket is also written by
// endpoint threads (send_now) under the connection's SendLane lock, which flush() and closing also hold, and
// read by a waiting caller (read_frames) under its RecvLane lock, which the progress thread's reads also hold.
// Non-goals: deciding what a frame means (FrameSink does), epoll bookkeeping (the engine does), timeouts.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "common/socket.h"
#include "transport/tcp/tcp_wire.h"
#include "transport/transport.h"

namespace zw::transport::tcp {

// Where a connection delivers what it read and reports what it sent; the peer's state implements it.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // The destination of a write frame's payload after checking region and bounds; an error drops the peer.
  virtual Result<std::byte*> write_target(const FrameHeader& header) = 0;
  // A whole frame arrived; `control` holds a control frame's payload or a kWriteAnnounced frame's announcement
  // (null for writes).
  virtual void frame_received(const FrameHeader& header, const Message* control) = 0;
  // Every byte of `req` was handed to the kernel; the sink takes the node back.
  virtual void request_sent(SendReq* req) = 0;
};

class Conn {
 public:
  enum class State : uint8_t {
    kConnecting,  // outgoing, non-blocking connect in progress
    kAwaitAck,    // outgoing, hello sent, waiting for the accepting rank's answer
    kAwaitHello,  // accepted, waiting for the connecting rank's hello
    kParked,      // accepted with a valid hello, but this rank has no endpoint for the peer yet
    kUp,          // frames flow
  };

  Conn(net::Fd fd, State state, int peer_rank, int index);

  int fd() const { return fd_.get(); }
  void close() { fd_.reset(); }

  State state;            // handshake progress
  int peer_rank;          // -1 until an accepted connection's hello arrived
  int index;              // connection index within the pair, -1 until known
  bool want_out = false;  // EPOLLOUT is in the epoll interest set (Engine::interest_mu_)
  bool read_off = false;  // EPOLLIN is not: a caller reads the socket while it spins (Engine::interest_mu_)
  bool closed = false;    // retired: events for it still in the current epoll batch are ignored
  bool goodbye = false;   // the peer announced a clean close (a kGoodbye frame arrived)
  bool eof = false;       // recv() returned 0
  std::string remote;     // the other side's socket address, for log messages

  // Reads the rest of a Hello without reading past it; true once all of it arrived.
  Result<bool> read_hello(Hello* out);
  Status send_hello(const Hello& hello);
  static constexpr size_t kReadBudget = size_t{16} << 20;  // bytes per read_frames call before yielding
  // Reads and dispatches frames until the socket has no more data or about `budget` bytes were received.
  Status read_frames(FrameSink& sink, size_t budget = kReadBudget);
  // Sends queued frames until `queue` is empty, the socket buffer is full or a fairness budget is used up.
  Status flush(Fifo<SendReq>& queue, FrameSink& sink);
  // After read_frames failed: whether the stream ended between two frames (goodbye, or EOF with nothing
  // half received), so that nothing the peer sent was lost on this connection.
  bool ended_between_frames() const { return goodbye || (eof && !in_frame_ && begin_ == end_); }
  // Part of a frame was received and the rest was not yet.
  bool mid_frame() const { return in_frame_ || begin_ != end_; }
  // Inside a frame with at least kStreamBytes still to come.
  bool streaming() const { return in_frame_ && left_ >= kStreamBytes; }
  static constexpr size_t kStreamBytes = 64 << 10;
  // A parked connection must stay silent: EOF or stray data are errors.
  Status check_silent();
  // Best effort: tells the peer this side closes on purpose, unless a frame is half sent.
  void send_goodbye(const Fifo<SendReq>& queue);

 private:
  static constexpr size_t kStageBytes = 8192;               // header staging buffer
  static constexpr size_t kWriteBudget = size_t{16} << 20;  // bytes per flush call before yielding

  // recv(); *got = 0 means "no data now". EOF and resets become kConnectionLost.
  Status recv_some(void* dst, size_t bytes, size_t* got);
  Status start_frame(FrameSink& sink);
  void end_payload(FrameSink& sink);

  net::Fd fd_;
  std::unique_ptr<std::byte[]> stage_;  // received bytes not yet consumed: [begin_, end_)
  size_t begin_ = 0;
  size_t end_ = 0;
  bool in_frame_ = false;     // hdr_ parsed, payload pending
  bool in_announce_ = false;  // receiving a kWriteAnnounced frame's announcement (into control_)
  FrameHeader hdr_{};         // frame being received
  std::byte* dst_ = nullptr;  // where the rest of the payload goes
  size_t left_ = 0;           // payload bytes still to receive
  Message control_;           // payload of the control frame being received
};

// The sending side of one connection, shared by the endpoint thread (inline sends) and the progress thread.
// Whoever holds `mu` may write the socket; frames go out in queue order, and a frame is only written inline
// when the queue is empty, so the byte stream keeps the posting order.
struct SendLane {
  std::mutex mu;
  int fd = -1;          // guarded by mu: the connection's socket while it is up, -1 otherwise
  Fifo<SendReq> queue;  // guarded by mu: frames not yet wholly handed to the kernel, in posting order
  // Under mu: writes header + payload (+ `announce`, header.announce_length bytes) now if the lane is up and
  // idle, in one sendmsg; *sent = bytes the kernel took. True when the whole frame went out. A failed send
  // takes nothing (the progress thread meets the error again).
  bool send_now(const FrameHeader& header, const std::byte* payload, size_t* sent, const std::byte* announce = nullptr);
};

// The receiving side of one connection, shared by a waiting caller (Engine::read_inline) and the progress
// thread. Whoever holds `mu` may call conn->read_frames(); the receive state lives in the Conn. A caller that
// meets a read error leaves it here and hands the peer to the progress thread, which fails the peer.
struct RecvLane {
  std::mutex mu;
  Conn* conn = nullptr;  // guarded by mu: the connection while it is up, null otherwise
  Status error;          // guarded by mu: a read error met by a caller, not yet acted on by the progress thread
};

// The kConnectionLost status of a peer that said goodbye.
Status goodbye_status();

// The kConnectionLost status for a failed socket call ("peer closed the connection", "connection reset").
Status lost_connection(const char* what, int err);

}  // namespace zw::transport::tcp
