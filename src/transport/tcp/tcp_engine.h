// The tcp transport's engine: one progress thread per transport that owns every socket's life. It accepts
// connections and runs the handshake, reads frames into registered memory, writes the frames that endpoints
// could not write themselves, and turns socket failures into sticky endpoint errors.
//
// Sending (the latency path): a posting thread first tries to write a single-stripe frame itself, under the
// connection's SendLane lock, when nothing is queued on that lane (SendLane::send_now: sendmsg with
// MSG_DONTWAIT). Only what the kernel did not take (EAGAIN, a partial write, an error, a connection not yet
// up) is queued on the lane; the progress thread then flushes it under the same lock, in order, with EPOLLOUT
// armed while the queue is not empty. A write sent whole inline while no other write is in flight completes
// at once on the posting thread; otherwise its record joins the in-flight list (under post_mu_) so that writes
// complete in posting order. Socket errors met inline leave the frame queued: the progress thread meets the
// error again and fails the peer with a message naming it. Posts that need the progress thread go on a
// mutex-guarded dirty list plus an eventfd that wakes it only when it sleeps in epoll_wait.
//
// Receiving: a caller in wait_for_activity() reads the sockets itself (tcp_reading.cc), each connection under its
// RecvLane lock: it spins reading them, then blocks in poll() on them, so that an arrival reaches it without a
// thread hand-off. Meanwhile the progress thread's epoll leaves their input alone (EPOLLIN off, kept off between
// a caller's waits and taken back after 1 ms without one), and reads whatever arrives while no caller waits,
// under the same lock, waking wait_for_activity() callers through Activity. A large frame arriving is left to the
// progress thread while the caller sleeps. A read error a caller meets is left in the lane for the progress
// thread, which fails the peer with a message naming it. The progress thread busy-polls epoll for a while after
// activity only on hosts with many cores; on small hosts it sleeps in epoll_wait at once.
//
// Non-goals: more than one progress thread, timers (deadlines are the callers'), reconnection.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/socket.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/tcp_endpoint.h"
#include "transport/tcp/tcp_memory_region.h"
#include "transport/tcp/tcp_wire.h"

namespace zw::transport::tcp {

// Hosts with fewer hardware threads never busy-wait: the progress thread sleeps in epoll_wait at once, and a
// spinning wait_for_activity() caller yields between polls.
inline constexpr unsigned kMinCoresToSpin = 8;

struct EngineConfig {
  int rank = 0;               // this rank
  int world_size = 1;         // ranks in the job
  uint64_t job_hash = 0;      // job_hash(TransportOptions::job_id)
  int conns_per_peer = 1;     // sockets per peer pair
  int local_ranks = 0;        // ranks on this host (ZW_LOCAL_WORLD_SIZE); 0 = unknown, assume world_size
  int64_t sockbuf = 0;        // SO_SNDBUF/SO_RCVBUF of every socket; 0 leaves the kernel's autotuning
  int64_t spin_us = 100;      // how long a waiting caller polls before it blocks (ZW_TCP_SPIN_US)
  std::string store_address;  // for advertising a wildcard listen address
};

// One frame of a write, as the endpoint planned it.
struct Stripe {
  int conn;                  // connection index
  FrameHeader header;        // complete frame header
  const std::byte* payload;  // caller's bytes
};

// Wakes wait_for_activity() callers. `ready` counts messages not yet polled and errors not yet reported, over
// all endpoints; pulse() wakes waiters without changing it (a write completed). Thread-safe.
//
// A waiting caller spins first (pause, or sched_yield between polls where configure() says so),
// then sleeps: on the condition variable, or, for the caller that reads the sockets itself, in `block` (a
// poll() on its sockets plus wake_fd(), which add/pulse/stop signal while such a caller is blocked). Either
// way an arrival wakes the caller without a hand-off through the progress thread.
class Activity {
 public:
  Activity();
  // `yield_when_spinning`: spins yield between polls (few cores, or more ranks than cores); `spin`: how long a
  // wait spins before sleeping.
  void configure(bool yield_when_spinning, std::chrono::nanoseconds spin);
  void add(int64_t delta);
  void pulse();
  // Returns when `ready` counts something, pulse() or stop() was called, or after `timeout`; calls `poll`
  // (may be empty) while it spins. `after_spin` (may be empty) runs once the spin ends, before returning or
  // sleeping. `block` (may be empty) replaces the condition-variable sleep: block(deadline_ns) returns when
  // something may have happened (a socket or wake_fd() became readable) or at deadline_ns (now_ns() clock),
  // and is called again until something is ready or the deadline passed; it returns false to sleep on the
  // condition variable instead for the rest of the wait.
  void wait(std::chrono::microseconds timeout, const std::function<void()>& poll = {},
            const std::function<void()>& after_spin = {}, const std::function<bool(uint64_t)>& block = {});
  void stop();
  // Readable while a blocked caller must look again (see wait); -1 when it could not be created (callers
  // then sleep on the condition variable).
  int wake_fd() const { return wake_fd_.get(); }
  // Makes wake_fd() readable if a caller is blocked (without waking anyone else).
  void kick();
  void drain_wake_fd();

 private:
  void notify();
  std::mutex mu_;
  std::condition_variable cv_;
  net::Fd wake_fd_;  // eventfd
  std::atomic<int64_t> ready_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> waiters_{0};  // callers asleep on cv_
  std::atomic<int> blocked_{0};  // callers in block(), woken through wake_fd_
  std::atomic<bool> stopped_{false};
  bool yield_ = true;          // set by configure() before any wait
  uint64_t spin_ns_ = 20'000;  // set by configure() before any wait
};

// Free lists of send requests and write records; every node ever allocated stays owned here. Not
// thread-safe: the engine guards it with post_mu_.
class RequestPool {
 public:
  SendReq* request();
  WriteRecord* record();
  void give_back(Fifo<SendReq>& requests, Fifo<WriteRecord>& records);

 private:
  Fifo<SendReq> free_requests_;
  Fifo<WriteRecord> free_records_;
  std::vector<std::unique_ptr<SendReq>> request_storage_;
  std::vector<std::unique_ptr<WriteRecord>> record_storage_;
};

// Threading: the public methods above the "progress thread" line may be called from any thread; the rest run
// on the progress thread (or after it was joined).
class Engine {
 public:
  Engine(EngineConfig config, std::shared_ptr<RegionTable> regions);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineConfig& config() const { return cfg_; }
  RegionTable& regions() { return *regions_; }
  Activity& activity() { return activity_; }

  // Listens on `where` and starts the progress thread; returns the address peers connect to.
  Result<std::string> listen(const net::HostPort& where);
  bool listening() const { return thread_.joinable(); }
  // Stops and joins the progress thread, closes every socket and fails every endpoint with kAborted.
  void shutdown();

  // Hands a new peer to the progress thread; `outgoing` are its started connects (higher rank only).
  Status add_peer(std::shared_ptr<PeerState> peer, std::vector<net::Fd> outgoing);
  // Hands the peer back; true when the progress thread (or shutdown) will release it (see wait_released).
  bool remove_peer(std::shared_ptr<PeerState> peer);
  // `idle`: every earlier write of the peer had completed when this one was posted. `announce`: the
  // announcement of a kWriteAnnounced frame (one stripe, header.announce_length bytes), copied if queued.
  void post_write(PeerState& peer, std::span<const Stripe> stripes, bool idle,
                  std::span<const std::byte> announce = {});
  void post_control(PeerState& peer, std::span<const std::byte> payload);
  bool peer_known_dead(int rank, std::string* why);
  // Transport::wait_for_activity: spins reading the sockets (read_inline), then sleeps on activity().
  void wait_for_activity(std::chrono::microseconds timeout);

  // --- progress thread ---
  void release(SendReq* req) { released_requests_.push(req); }
  void release(WriteRecord* record) { released_records_.push(record); }

 private:
  struct Command {
    std::shared_ptr<PeerState> peer;  // the peer to add or remove
    std::vector<net::Fd> outgoing;    // started connects of an added peer
    bool add;                         // add (true) or remove (false)
  };

  // readers_mu_ for changing readers_: a caller blocked in block_on_sockets (holding it) lets go first.
  class ReadersLock {
   public:
    explicit ReadersLock(Engine& engine);
    ~ReadersLock();

   private:
    Engine& engine_;
  };

  void mark_dirty(PeerState& peer);  // under post_mu_
  // Queues the unsent rest of one frame on `lane` and marks the peer dirty; under the lane's lock and post_mu_.
  SendReq* queue_rest(PeerState& peer, SendLane& lane, const FrameHeader& header, const std::byte* payload, size_t sent,
                      WriteRecord* record);
  void post_striped(PeerState& peer, std::span<const Stripe> stripes);
  void wake();
  void run();
  bool drain();
  void handle_command(Command& command);
  void dispatch(void* tag, uint32_t events);
  void accept_all();
  void on_connected(Conn* c);
  void on_ack(Conn* c);
  void on_hello(Conn* c);
  void on_parked(Conn* c);
  void on_data(Conn* c, uint32_t events);
  bool read_conn(PeerState& peer, int index);
  // --- a caller waiting for activity, under readers_mu_ (tcp_reading.cc) ---
  // Reads every reader's connections whose RecvLane is free; *mid_frame: one of them stopped inside a frame.
  void read_inline(bool* mid_frame);
  // Blocks in poll() on the readers' sockets and the activity's wake_fd until one is readable or `deadline_ns`,
  // then reads what arrived. False when the caller should let go of readers_mu_ and sleep instead: a thread
  // waits for readers_mu_, or a large frame is arriving (the progress thread reads it on, see tcp_reading.cc).
  bool block_on_sockets(uint64_t deadline_ns, bool* mid_frame);
  void set_read_interest(bool on);
  // Whether a reader's connection is inside a large frame or being read by another thread (PeerState::streaming).
  bool any_streaming() const;
  // Progress thread: gives the sockets' input back to epoll once no caller waited for a while.
  void resume_reads_if_idle();
  void attach(PeerState& peer, std::unique_ptr<Conn> c);
  void end_connection(PeerState& peer, Conn* c, const Status& status);
  void flush(PeerState& peer, int index);
  // Sticky error for the peer and closes its sockets; `clean` when the peer said goodbye (logged at INFO).
  void fail_peer(PeerState& peer, const Status& status, bool clean = false);
  // Says goodbye on and closes every connection of a peer this rank lets go of.
  void close_peer(PeerState& peer);
  void retire(std::unique_ptr<Conn> c);
  std::unique_ptr<Conn> take_unattached(Conn* c);
  void set_interest(Conn* c, bool out);
  void modify_interest(Conn* c, std::optional<bool> in, std::optional<bool> out);
  Hello make_hello(int index) const;
  std::string check_hello(const Hello& hello) const;

  const EngineConfig cfg_;
  std::shared_ptr<RegionTable> regions_;
  Activity activity_;
  net::Fd epoll_;
  net::Fd wake_fd_;  // eventfd
  net::Fd listener_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};       // the progress thread may be blocked in epoll_wait
  std::atomic<bool> posts_pending_{false};  // dirty_ or commands_ is non-empty

  std::mutex post_mu_;
  std::vector<PeerState*> dirty_;  // guarded by post_mu_; peers with posted requests
  std::vector<Command> commands_;  // guarded by post_mu_
  RequestPool pool_;               // guarded by post_mu_
  std::vector<bool> claimed_;      // guarded by post_mu_; ranks that have an endpoint
  bool shut_down_ = false;         // guarded by post_mu_; commands are no longer taken

  // Progress thread only.
  std::vector<std::shared_ptr<PeerState>> peers_;  // by rank
  std::vector<std::unique_ptr<Conn>> unattached_;  // accepted, before the hello or parked
  std::vector<std::unique_ptr<Conn>> graveyard_;   // closed during this epoll batch
  std::vector<PeerState*> dirty_taken_;            // dirty_ as taken by drain()
  std::vector<Command> commands_taken_;            // commands_ as taken by drain()
  Fifo<SendReq> released_requests_;
  Fifo<WriteRecord> released_records_;

  std::mutex interest_mu_;  // epoll interest of the connections (after a RecvLane's mu)
  std::mutex readers_mu_;   // taken alone, or before a RecvLane's mu and post_mu_; held by the reading caller
  std::vector<std::shared_ptr<PeerState>> readers_;  // guarded by readers_mu_; peers with an endpoint
  std::vector<pollfd> pollfds_;                      // guarded by readers_mu_; block_on_sockets' poll set
  std::atomic<int> readers_wanted_{0};               // threads about to lock readers_mu_ for add/remove: readers let go
  std::atomic<bool> reads_quiet_{false};             // callers have turned EPOLLIN of the readers' sockets off
  std::atomic<uint64_t> reader_left_ns_{0};          // when the last reading caller's wait ended (now_ns)

  std::mutex dead_mu_;
  std::vector<std::string> dead_;  // guarded by dead_mu_; why a peer's connection was lost, by rank
};

}  // namespace zw::transport::tcp
