// Helpers of the tcp transport tests: transports as ranks of one process (ranks-as-threads), all pairs
// connected, byte patterns that expose misplaced stripes, and polling with deadlines.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace zw::transport::tcp_test {

#define ZW_ASSERT_OK(expr)                                                 \
  do {                                                                     \
    const auto& zw_value_ = (expr); /* extends a temporary's lifetime */   \
    const ::zw::Status& zw_status_ = ::zw::internal::as_status(zw_value_); \
    ASSERT_TRUE(zw_status_.ok()) << zw_status_.to_string();                \
  } while (0)

inline std::string random_job_id() {
  std::random_device rd;
  return "tcp-test-" + std::to_string(rd()) + "-" + std::to_string(rd());
}

// Byte `i` of rank `rank`'s source pattern; a hash of the index, so a stripe landing at the wrong offset shows.
inline std::byte pattern(int rank, size_t i, uint32_t salt = 0) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(rank) << 56) ^ salt;
  x ^= x >> 29;
  return static_cast<std::byte>(x & 0xff);
}

inline void fill_pattern(std::vector<std::byte>& buf, int rank, uint32_t salt = 0) {
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(rank, i, salt);
}

// World of transports in this process, every pair connected: ep[r][p] is rank r's endpoint to rank p.
struct World {
  std::string job_id;
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<std::vector<std::unique_ptr<Endpoint>>> ep;

  ~World() {
    for (auto& row : ep) row.clear();  // endpoints before their transports
    transports.clear();
  }

  Transport& t(int rank) { return *transports[static_cast<size_t>(rank)]; }
  Endpoint& e(int rank, int peer) { return *ep[static_cast<size_t>(rank)][static_cast<size_t>(peer)]; }
};

inline TransportOptions options_for(int rank, int world_size, const std::string& job_id) {
  TransportOptions o;
  o.rank = rank;
  o.world_size = world_size;
  o.job_id = job_id;
  return o;
}

// Creates `world_size` listening transports without connecting them.
inline std::unique_ptr<World> make_transports(int world_size, int conns_per_peer, int64_t sockbuf = -1) {
  auto w = std::make_unique<World>();
  w->job_id = random_job_id();
  TcpOptions tcp;
  tcp.conns_per_peer = conns_per_peer;
  tcp.sockbuf = sockbuf;
  for (int r = 0; r < world_size; ++r) {
    auto t = create_tcp_transport(options_for(r, world_size, w->job_id), tcp);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return nullptr;
    auto address = (*t)->listen();
    EXPECT_TRUE(address.ok()) << address.status().to_string();
    if (!address.ok()) return nullptr;
    w->addresses.push_back(*address);
    w->transports.push_back(std::move(t).value());
  }
  w->ep.resize(static_cast<size_t>(world_size));
  for (auto& row : w->ep) row.resize(static_cast<size_t>(world_size));
  return w;
}

// Creates and fully connects a world; null (with a test failure recorded) when that failed.
inline std::unique_ptr<World> make_world(int world_size, int conns_per_peer, int64_t sockbuf = -1) {
  auto w = make_transports(world_size, conns_per_peer, sockbuf);
  if (!w) return nullptr;
  for (int r = 0; r < world_size; ++r) {
    for (int p = 0; p < world_size; ++p) {
      if (p == r) continue;
      auto e = w->t(r).connect(p, w->addresses[static_cast<size_t>(p)]);
      EXPECT_TRUE(e.ok()) << e.status().to_string();
      if (!e.ok()) return nullptr;
      w->ep[static_cast<size_t>(r)][static_cast<size_t>(p)] = std::move(e).value();
    }
  }
  for (int r = 0; r < world_size; ++r) {
    for (int p = 0; p < world_size; ++p) {
      if (p == r) continue;
      Status st = w->e(r, p).wait_connected(Deadline::after_seconds(10));
      EXPECT_TRUE(st.ok()) << st.to_string();
      if (!st.ok()) return nullptr;
    }
  }
  return w;
}

// Polls until a message arrives, the endpoint fails or the deadline passes.
inline Result<Message> next_message(Transport& t, Endpoint& e, Deadline deadline) {
  Message m;
  for (;;) {
    Result<bool> got = e.poll(&m);
    if (!got.ok()) return got.status();
    if (*got) return m;
    if (deadline.expired()) return Status(Code::kTimeout, "no message from rank " + std::to_string(e.peer()));
    t.wait_for_activity(std::chrono::milliseconds(20));
  }
}

// Waits until every posted write of `e` completed locally.
inline Status wait_writes_completed(Transport& t, Endpoint& e, Deadline deadline) {
  while (e.writes_completed() < e.writes_posted()) {
    if (!e.error().ok()) return e.error();
    if (deadline.expired()) return Status(Code::kTimeout, "writes did not complete");
    t.wait_for_activity(std::chrono::milliseconds(5));
  }
  return Status();
}

inline std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace zw::transport::tcp_test
