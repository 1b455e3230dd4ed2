// The tcp transport: moves bytes between ranks over TCP sockets, for ranks on different hosts (or as a
// fallback on one host). One progress thread per transport drives every socket with epoll; a write is a
// header + payload frame (striped over several sockets when large) that the receiving progress thread
// recv()s straight into the registered destination before delivering the Notify.
//
// Non-goals: one-sided semantics without the peer's CPU (Caps::one_sided is false), device memory,
// encryption, reconnecting after a failure (errors are sticky and name the peer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/transport.h"

namespace zw::transport {

// Settings of the tcp backend that tests and tools may override; defaults come from the knobs.
struct TcpOptions {
  int conns_per_peer = 0;   // sockets per peer pair; 0 = ZW_TCP_CONNS_PER_PEER
  int64_t sockbuf = -1;     // SO_SNDBUF/SO_RCVBUF; -1 = ZW_TCP_SOCKBUF, 0 = kernel autotuning
  std::string listen_addr;  // "host" or "host:port" to listen on; "" = ZW_TCP_LISTEN_ADDR (then automatic)
};

Result<std::unique_ptr<Transport>> create_tcp_transport(const TransportOptions& options);
Result<std::unique_ptr<Transport>> create_tcp_transport(const TransportOptions& options, const TcpOptions& tcp);

}  // namespace zw::transport
