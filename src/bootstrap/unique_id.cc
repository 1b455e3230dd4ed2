// create_unique_id / connect_unique_id, mirroring ncclGetUniqueId: the id carries "address\0token", where the
// address names a store server this process starts (at the host name, or at the address of the interface that
// ZW_SOCKET_IFNAME selects, as NCCL_SOCKET_IFNAME does for NCCL) and the token is 128 random bits in hex.
//
// Servers started here live in a process-wide registry until exit. Non-goals: ids that outlive the process
// that created them, encryption of the token (the id is the secret; pass it over a trusted channel).
#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <vector>

#include "bootstrap/bootstrap_internal.h"
#include "bootstrap/store_util.h"
#include "common/interfaces.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/socket.h"
#include "zerowire/bootstrap.h"

namespace zw {
namespace {

constexpr size_t kTokenBytes = 16;
constexpr size_t kTokenHex = 2 * kTokenBytes;

// Servers started by create_unique_id, kept until exit.
class Registry {
 public:
  static Registry& instance() {
    // Touch the logging settings first so that they are destroyed after the registry (whose servers' threads
    // may log until they are joined).
    (void)log::enabled(log::Level::kWarn, log::Subsys::kBoot);
    static Registry registry;
    return registry;
  }
  void keep(std::unique_ptr<TcpStoreServer> server) {
    std::lock_guard<std::mutex> lock(mu_);
    servers_.push_back(std::move(server));
  }
  // Runs `start` unless a server for `address` is already kept (serve_unique_id: once per fixed address).
  Status keep_once(const std::string& address, const std::function<Result<std::unique_ptr<TcpStoreServer>>()>& start) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fixed_.insert(address).second) return Status();
    auto server = start();
    if (!server.ok()) {
      fixed_.erase(address);
      return server.status();
    }
    servers_.push_back(std::move(server).value());
    return Status();
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<TcpStoreServer>> servers_;
  std::set<std::string> fixed_;  // addresses served for unique_id_at ids
};

Result<std::string> random_token() {
  unsigned char raw[kTokenBytes];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error("getrandom", errno);
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : raw) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 15]);
  }
  return token;
}

// The token of a unique_id_at id: 32 hex digits that every rank derives from the address alike (FNV-1a, two seeds).
std::string fixed_token(const std::string& address) {
  std::string token;
  for (uint64_t seed : {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull}) {
    uint64_t h = seed;
    for (char c : "zerowire fixed-address store " + address) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    token += hex;
  }
  return token;
}

Status malformed(const std::string& why) {
  return Status(Code::kInvalidArgument, "malformed unique id (" + why +
                                            "): pass the bytes create_unique_id returned on the root rank, "
                                            "unchanged, to every rank");
}

}  // namespace

Result<UniqueIdParts> decode_unique_id(const UniqueId& id) {
  const char* b = id.bytes;
  const size_t n = sizeof id.bytes;
  const char* addr_end = static_cast<const char*>(std::memchr(b, '\0', n));
  if (addr_end == nullptr) return malformed("no terminator after the address");
  if (addr_end == b) return malformed("empty address");
  const char* token = addr_end + 1;
  const char* token_end = static_cast<const char*>(std::memchr(token, '\0', static_cast<size_t>(b + n - token)));
  if (token_end == nullptr) return malformed("no terminator after the token");
  UniqueIdParts d{std::string(b, addr_end), std::string(token, token_end)};
  if (d.token.size() != kTokenHex) return malformed("token is not " + std::to_string(kTokenHex) + " hex digits");
  for (char c : d.token)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return malformed("token is not hex");
  for (const char* p = token_end; p < b + n; ++p)
    if (*p != '\0') return malformed("bytes after the token are not zero");
  for (char c : d.address)
    if (c < 0x21 || c > 0x7e) return malformed("address has unprintable characters");
  Result<net::HostPort> hp = net::parse_host_port(d.address);
  if (!hp.ok()) return malformed(hp.status().message());
  return d;
}

Result<UniqueId> encode_unique_id(const std::string& address, const std::string& token) {
  UniqueId id{};
  if (address.size() + 1 + token.size() + 1 > sizeof id.bytes)
    return Status(Code::kInvalidArgument, "store address '" + address + "' is too long for a unique id");
  std::memcpy(id.bytes, address.data(), address.size());
  std::memcpy(id.bytes + address.size() + 1, token.data(), token.size());
  return id;
}

Result<UniqueId> create_unique_id() {
  ZW_ASSIGN_OR_RETURN(std::string token, random_token());
  TcpStoreServerOptions options;
  options.listen_address = "0.0.0.0:0";
  options.auth_token = token;
  int64_t max_frame = knobs().store_max_frame;
  if (max_frame > 0) options.max_frame_bytes = static_cast<size_t>(max_frame);
  std::string host = net::hostname();  // what the other ranks connect to: the host name, or ZW_SOCKET_IFNAME's address
  if (!knobs().socket_ifname.empty()) {
    ZW_ASSIGN_OR_RETURN(host, net::interface_address(knobs().socket_ifname, "ZW_SOCKET_IFNAME"));
  }
  ZW_ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreServer> server, start_tcp_store_server(options));
  std::string address = net::HostPort{host, server->port()}.to_string();
  auto id = encode_unique_id(address, token);
  if (!id.ok()) return Status(Code::kInvalidArgument, "host name '" + host + "' is too long for a unique id");
  Registry::instance().keep(std::move(server));
  ZW_INFO(kBoot, "created unique id for the store at %s", address.c_str());
  return id;
}

Result<std::shared_ptr<Store>> connect_unique_id(const UniqueId& id, Store::Timeout timeout) {
  ZW_ASSIGN_OR_RETURN(UniqueIdParts d, decode_unique_id(id));
  return connect_tcp_store(d.address, d.token, timeout);
}

Result<UniqueId> unique_id_at(const std::string& host_port) {
  Result<net::HostPort> hp = net::parse_host_port(host_port);
  if (!hp.ok()) return Status(Code::kInvalidArgument, hp.status().message() + " (e.g. node0:29500 or [fd00::1]:29500)");
  const std::string address = hp->to_string();
  return encode_unique_id(address, fixed_token(address));
}

Status serve_unique_id(const UniqueId& id) {
  ZW_ASSIGN_OR_RETURN(UniqueIdParts d, decode_unique_id(id));
  if (d.token != fixed_token(d.address))
    return Status(Code::kInvalidArgument, "the unique id of " + d.address +
                                              " was not made by unique_id_at: create_unique_id's ids are served by "
                                              "the process that created them");
  ZW_ASSIGN_OR_RETURN(net::HostPort hp, net::parse_host_port(d.address));
  return Registry::instance().keep_once(d.address, [&]() -> Result<std::unique_ptr<TcpStoreServer>> {
    TcpStoreServerOptions options;
    options.listen_address =
        net::HostPort{hp.host.find(':') != std::string::npos ? "::" : "0.0.0.0", hp.port}.to_string();
    options.auth_token = d.token;
    const int64_t max_frame = knobs().store_max_frame;
    if (max_frame > 0) options.max_frame_bytes = static_cast<size_t>(max_frame);
    auto server = start_tcp_store_server(options);
    if (!server.ok()) return server.status().with_context("serving the store of " + d.address);
    ZW_INFO(kBoot, "serving the store of the fixed address %s", d.address.c_str());
    return server;
  });
}

}  // namespace zw
