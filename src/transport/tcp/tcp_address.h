// Addresses and sockets of the tcp transport: which local address to listen on and advertise, non-blocking
// connects, and the options every data socket gets (non-blocking, TCP_NODELAY, ZW_TCP_SOCKBUF buffers).
//
// Non-goals: interface selection by name (ZW_TCP_LISTEN_ADDR takes an address), retrying refused connects
// (a peer publishes its address only after listening, so a refusal means it is gone).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "common/socket.h"
#include "zerowire/status.h"

namespace zw::transport::tcp {

// Where to listen: `listen_addr` ("host" or "host:port") when set, else the local address that routes to
// `store_address`, else 127.0.0.1. The port is 0 (any) unless `listen_addr` names one.
Result<net::HostPort> choose_listen_address(const std::string& listen_addr, const std::string& store_address);

// The address peers should connect to for a listener bound to `bound`: the bound address itself, or for a
// wildcard bind (0.0.0.0, ::) the address that routes to the store (or the host name).
std::string advertised_address(const net::HostPort& bound, const std::string& store_address);

// Non-blocking, close-on-exec, TCP_NODELAY and SO_SNDBUF/SO_RCVBUF = sockbuf (when > 0).
Status configure_socket(int fd, int64_t sockbuf);

// Starts a non-blocking connect to `where`; the socket becomes writable when the connect finished, and
// connect_error() then tells whether it succeeded.
Result<net::Fd> start_connect(const net::HostPort& where, int64_t sockbuf);

// "host:port" of a socket address, for log messages.
std::string sockaddr_string(const sockaddr* sa);

// The pending error of a finished non-blocking connect (0 when connected).
int connect_error(int fd);

}  // namespace zw::transport::tcp
