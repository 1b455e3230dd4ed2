// bootstrap_from_environment: discover the rank, then rank 0 serves the store (unless zwrun already serves
// it on that port) and every rank connects to it.
//
// Non-goals: choosing a port (the launcher or the user does), retrying a failed bootstrap.
#include "zerowire/bootstrap.h"

#include <cerrno>
#include <cstring>

#include "bootstrap/bootstrap_internal.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/socket.h"

namespace zw {
namespace {

// net::listen_tcp reports errno only as text (system_error), so EADDRINUSE is recognised by its strerror.
bool port_in_use(const Status& status) {
  return status.code() == Code::kSystem && status.message().find(std::strerror(EADDRINUSE)) != std::string::npos;
}

}  // namespace

Result<Bootstrap> bootstrap_rank(const RankInfo& info, Store::Timeout timeout, size_t max_frame_bytes) {
  Bootstrap boot;
  boot.info = info;
  Result<net::HostPort> where = net::parse_host_port(info.store_address);
  if (!where.ok()) return where.status().with_context("store address").at(__FILE__, __LINE__);
  bool port_was_in_use = false;
  if (info.rank == 0) {
    TcpStoreServerOptions options;
    bool v6 = where->host.find(':') != std::string::npos;
    options.listen_address = net::HostPort{v6 ? "::" : "0.0.0.0", where->port}.to_string();
    options.auth_token = info.auth_token;
    options.max_frame_bytes = max_frame_bytes;
    Result<std::unique_ptr<TcpStoreServer>> server = start_tcp_store_server(options);
    if (server.ok()) {
      boot.server = std::move(server).value();
      ZW_INFO(kBoot, "rank 0 serves the store on port %u", static_cast<unsigned>(where->port));
    } else if (port_in_use(server.status())) {
      port_was_in_use = true;
      ZW_INFO(kBoot, "store port %u is already in use (zwrun serves the store): connecting as a client",
              static_cast<unsigned>(where->port));
    } else {
      return server.status().with_context("rank 0 cannot serve the store").at(__FILE__, __LINE__);
    }
  }
  Result<std::shared_ptr<Store>> store = connect_tcp_store(info.store_address, info.auth_token, timeout);
  if (!store.ok()) {
    Status st = store.status();
    if (port_was_in_use && st.code() != Code::kAuthFailed)
      st = Status(st.code(), st.message() + " (port " + std::to_string(where->port) +
                                 " was already in use: unless zwrun serves the store there, another program owns "
                                 "it; choose another port)");
    return st.with_context("rank " + std::to_string(info.rank) + " (launched by " + info.source + ")")
        .at(__FILE__, __LINE__);
  }
  boot.store = std::move(store).value();
  return boot;
}

Result<Bootstrap> bootstrap_from_environment(Store::Timeout timeout) {
  ZW_ASSIGN_OR_RETURN(RankInfo info, discover_rank_from_environment());
  log::set_process_rank(info.rank);
  int64_t max_frame = knobs().store_max_frame;
  return bootstrap_rank(info, timeout, max_frame > 0 ? static_cast<size_t>(max_frame) : 0);
}

}  // namespace zw
