// Entry points of the bootstrap layer that the public headers do not expose: server tuning (so tests can
// shorten the HELLO deadline), the second half of bootstrap_from_environment (so tests can bootstrap a
// RankInfo without touching the process environment) and the unique id's pure encoding (for tests/fuzz).
//
// Non-goals: a second public API; callers outside src/bootstrap and tests/bootstrap use zerowire/*.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "zerowire/bootstrap.h"
#include "zerowire/status.h"
#include "zerowire/store.h"

namespace zw {

struct TcpStoreServerTuning {
  std::chrono::milliseconds hello_timeout{10000};  // a connection must say HELLO this soon after accept
};

// start_tcp_store_server with explicit tuning.
Result<std::unique_ptr<TcpStoreServer>> start_tcp_store_server(const TcpStoreServerOptions& options,
                                                               const TcpStoreServerTuning& tuning);

// The parts a UniqueId carries: "host:port\0token\0", zeros after (create_unique_id's layout).
struct UniqueIdParts {
  std::string address;  // host:port of the store
  std::string token;    // 32 lowercase hex digits
};
// Validates and splits an id as connect_unique_id does (ncclCommInitRank's ncclUniqueId bytes go through it too);
// kInvalidArgument saying what is wrong. Pure: no I/O.
Result<UniqueIdParts> decode_unique_id(const UniqueId& id);
// The id naming `address` and `token`; kInvalidArgument when they do not fit its 128 bytes.
Result<UniqueId> encode_unique_id(const std::string& address, const std::string& token);

// Rank 0 serves the store on info.store_address's port (all interfaces) unless that port is in use; every
// rank then connects to it as a client.
Result<Bootstrap> bootstrap_rank(const RankInfo& info, Store::Timeout timeout, size_t max_frame_bytes);

}  // namespace zw
