// zerowire/store.h — the bootstrap key-value store ranks use to find each other.
//
// A Store is a small key-value service with blocking get/wait, an atomic counter (add) and delete. The TCP
// store is served by one process (zwrun, rank 0, or whoever called get_unique_id) and every client must
// present the job's auth token; the in-memory store serves ranks that are threads of one process (tests).
// Values are binary-safe strings. Thread-safe: one Store may be used from several threads.
// Non-goals: persistence, replication, watching keys.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zerowire/status.h"

namespace zw {

class Store {
 public:
  using Timeout = std::chrono::milliseconds;
  virtual ~Store() = default;

  virtual Status set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists (or the timeout) and returns its value.
  virtual Result<std::string> get(const std::string& key, Timeout timeout) = 0;
  // Waits until every key exists.
  virtual Status wait(const std::vector<std::string>& keys, Timeout timeout) = 0;
  // Atomically adds `delta` to the integer stored at key (missing = 0) and returns the new value.
  virtual Result<int64_t> add(const std::string& key, int64_t delta) = 0;
  // Removes key; removing a missing key is not an error. Returns whether it existed.
  virtual Result<bool> del(const std::string& key) = 0;
};

// A view of another store that prefixes every key (one namespace per communicator).
class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix) : base_(std::move(base)), prefix_(std::move(prefix)) {}
  Status set(const std::string& key, const std::string& value) override { return base_->set(prefix_ + key, value); }
  Result<std::string> get(const std::string& key, Timeout timeout) override { return base_->get(prefix_ + key, timeout); }
  Status wait(const std::vector<std::string>& keys, Timeout timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override { return base_->add(prefix_ + key, delta); }
  Result<bool> del(const std::string& key) override { return base_->del(prefix_ + key); }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

// A store shared by threads of this process.
std::shared_ptr<Store> make_memory_store();

// Serves a TCP store in a background thread until destroyed.
class TcpStoreServer {
 public:
  virtual ~TcpStoreServer() = default;
  virtual uint16_t port() const = 0;
  // "host:port" clients connect to.
  virtual std::string address() const = 0;
};

struct TcpStoreServerOptions {
  std::string listen_address = "0.0.0.0:0";  // host:port to bind; port 0 picks a free port
  std::string auth_token;                    // clients must present exactly this token; must not be empty
  size_t max_frame_bytes = 64u << 20;        // larger requests are rejected and the connection dropped
};
Result<std::unique_ptr<TcpStoreServer>> start_tcp_store_server(const TcpStoreServerOptions& options);

// Connects to a TCP store, presenting `auth_token`; retries until `timeout` while the server comes up.
Result<std::shared_ptr<Store>> connect_tcp_store(const std::string& address, const std::string& auth_token,
                                                 Store::Timeout timeout);

}  // namespace zw
