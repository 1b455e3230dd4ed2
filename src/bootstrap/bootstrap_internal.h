// Entry points of the bootstrap layer that the public headers do not expose: server tuning (so tests can
// shorten the HELLO deadline) and the second half of bootstrap_from_environment (so tests can bootstrap a
// RankInfo without touching the process environment).
//
// Non-goals: a second public API; callers outside src/bootstrap and tests/bootstrap use zerowire/*.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

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

// Rank 0 serves the store on info.store_address's port (all interfaces) unless that port is in use; every
// rank then connects to it as a client.
Result<Bootstrap> bootstrap_rank(const RankInfo& info, Store::Timeout timeout, size_t max_frame_bytes);

}  // namespace zw
