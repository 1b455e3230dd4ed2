// Process liveness of verbs peers: one small side TCP connection per pair of ranks whose end-of-file without a
// goodbye means the peer's process is gone.
//
// Why not the RDMA path: an RC QP towards a killed process only retransmits. Soft-RoCE treats ZW_IB_RETRY_CNT=7
// as "retry forever", and even real HCAs take retry_cnt x 4.096 us x 2^ZW_IB_TIMEOUT (about 30 s at the
// defaults) before IBV_WC_RETRY_EXC_ERR, and only if a work request is outstanding. The kernel, however, closes
// every socket of a process that dies, whatever killed it (SIGKILL, OOM killer, segfault), and the FIN or RST
// crosses the network, so this also works between hosts. A host that vanishes without sending anything (power
// loss, cable) is caught by TCP keep-alive (idle 2 s, 3 probes 1 s apart) and TCP_USER_TIMEOUT in ~5 s.
//
// Protocol: start() opens a listener on the interface that reaches the bootstrap store (loopback without one).
// For each pair, the lower rank connects to the higher rank's listener and sends an 8-byte hello {magic, rank};
// on orderly shutdown (destructor) each side sends one goodbye byte before closing. End-of-file or a reset
// without a goodbye reports the peer as died; after a goodbye, as left.
//
// Threading: connect() is called by the transport's caller; one monitor thread owns the poll set and runs the
// callback (which must be thread-safe and must not call back into the monitor).
// Non-goals: detecting a live but hung process (ZW_TIMEOUT does that), heartbeats, reconnecting.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/socket.h"
#include "transport/verbs/verbs_liveness_wire.h"
#include "zerowire/status.h"

namespace zw::transport::verbs {

class LivenessMonitor {
 public:
  // died: the connection closed without a goodbye (the process is gone); otherwise the peer left in order.
  using Callback = std::function<void(int peer, bool died, const std::string& why)>;

  // Listens (see the header comment) and starts the monitor thread.
  static Result<std::unique_ptr<LivenessMonitor>> start(int rank, int world_size, const std::string& store_address,
                                                        Callback callback);
  // Stops the thread, says goodbye on every connection — those still in the listener's backlog or whose hello was not
  // read yet included — and closes them without a reset (see the destructor).
  ~LivenessMonitor();
  LivenessMonitor(const LivenessMonitor&) = delete;
  LivenessMonitor& operator=(const LivenessMonitor&) = delete;

  // "host:port" of the listener, published in the verbs address.
  const std::string& address() const { return address_; }

  // Called once per peer with the address it published: the lower rank of the pair connects (and says hello);
  // the higher rank waits for that connection in the monitor thread. An error means the peer's listener is
  // unreachable (it is not running, or a firewall blocks the port).
  Status connect(int peer, const std::string& peer_address, Deadline deadline);

 private:
  struct Socket {
    Socket(int rank, int world_size) : reader(rank, world_size) {}
    net::Fd fd;              // the connection
    int peer = -1;           // -1 until the hello arrived (accepted side)
    LivenessReader reader;   // what the accepted side has received (verbs_liveness_wire.h)
    bool goodbye = false;    // the peer said goodbye
  };

  LivenessMonitor(int rank, int world_size, Callback callback);
  void run();
  void accept_new();
  // Reads what arrived; false when the socket is finished (and the callback ran if it named a peer).
  bool service(Socket& s, short revents);
  void wake();

  const int rank_;
  const int world_size_;
  const Callback callback_;
  net::Fd listen_fd_;                             // the listener
  net::Fd wake_fd_;                               // eventfd: new sockets or stop
  std::string address_;                           // listener address
  std::atomic<bool> stop_{false};                 // set by the destructor
  std::mutex mu_;                                 // guards pending_
  std::vector<std::unique_ptr<Socket>> pending_;  // connected by connect(), not yet in the poll set
  std::vector<std::unique_ptr<Socket>> sockets_;  // monitor thread only
  std::thread thread_;                            // run()
};

}  // namespace zw::transport::verbs
