// Helpers shared by the bootstrap tests: a map-backed EnvLookup, a free TCP port, a TCP store server on
// loopback, and a raw connection that speaks (or abuses) the store's wire format byte by byte.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "bootstrap/bootstrap_internal.h"
#include "bootstrap/store_frame.h"
#include "common/socket.h"
#include "zerowire/bootstrap.h"
#include "zerowire/store.h"

namespace zw::testing {

inline constexpr char kToken[] = "test-token-0123";

// An EnvLookup over a fixed map; the map must outlive the lookup.
inline EnvLookup env_of(const std::map<std::string, std::string>& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

// A port that nothing listened on a moment ago.
inline uint16_t free_port() {
  uint16_t port = 0;
  auto listener = net::listen_tcp({"127.0.0.1", 0}, 1, &port);
  EXPECT_TRUE(listener.ok()) << listener.status().to_string();
  return port;
}

inline std::unique_ptr<TcpStoreServer> start_server(size_t max_frame = 64u << 20,
                                                    std::chrono::milliseconds hello_timeout = std::chrono::seconds(10),
                                                    uint16_t port = 0) {
  TcpStoreServerOptions options;
  options.listen_address = "127.0.0.1:" + std::to_string(port);
  options.auth_token = kToken;
  options.max_frame_bytes = max_frame;
  TcpStoreServerTuning tuning;
  tuning.hello_timeout = hello_timeout;
  auto server = start_tcp_store_server(options, tuning);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(server).value() : nullptr;
}

inline std::shared_ptr<Store> connect(const TcpStoreServer& server, const std::string& token = kToken) {
  auto store = connect_tcp_store(server.address(), token, std::chrono::seconds(5));
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  return store.ok() ? *store : nullptr;
}

// A socket to the server that sends whatever bytes a test wants.
class RawConn {
 public:
  explicit RawConn(const TcpStoreServer& server) {
    auto fd = net::connect_tcp({"127.0.0.1", server.port()}, Deadline::after_seconds(5));
    EXPECT_TRUE(fd.ok()) << fd.status().to_string();
    if (fd.ok()) fd_ = std::move(*fd);
  }
  void send(const std::string& bytes) {
    Status st = net::send_all(fd_.get(), bytes.data(), bytes.size(), Deadline::after_seconds(5), "server");
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  // Sends HELLO with the right token and expects OK.
  void hello() {
    store::Request r;
    r.op = store::Op::kHello;
    r.key = kToken;
    send(store::encode_request(r));
    auto reply = read_reply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->op, store::Op::kOk);
  }
  // The next reply frame, or nullopt when the connection closed or nothing arrived in time.
  std::optional<store::Reply> read_reply(double timeout_s = 5) {
    Deadline deadline = Deadline::after_seconds(timeout_s);
    char header[4];
    if (!net::recv_all(fd_.get(), header, 4, deadline, "server").ok()) return std::nullopt;
    std::string payload(store::read_frame_length(header), '\0');
    if (!net::recv_all(fd_.get(), payload.data(), payload.size(), deadline, "server").ok()) return std::nullopt;
    auto reply = store::decode_reply(payload);
    EXPECT_TRUE(reply.ok()) << reply.status().to_string();
    return reply.ok() ? std::optional<store::Reply>(*reply) : std::nullopt;
  }
  // Whether the server closed the connection within the timeout (any pending bytes are discarded).
  bool closed_by_server(double timeout_s = 5) {
    Deadline deadline = Deadline::after_seconds(timeout_s);
    char buf[256];
    for (;;) {
      Status st = net::recv_all(fd_.get(), buf, 1, deadline, "server");
      if (st.code() == Code::kConnectionLost) return true;
      if (!st.ok()) return false;
    }
  }
  void close() { fd_.reset(); }

 private:
  net::Fd fd_;
};

// A frame with an arbitrary payload.
inline std::string frame(const std::string& payload) {
  std::string out(4, '\0');
  auto n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + payload;
}

}  // namespace zw::testing
