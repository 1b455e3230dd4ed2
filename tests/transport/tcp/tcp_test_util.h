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
#include "tests/transport/transport_test_util.h"

namespace zw::transport::tcp_test {

using test_util::bytes_of;
using test_util::fill_pattern;
using test_util::next_message;
using test_util::pattern;
using test_util::World;

inline std::string random_job_id() {
  std::random_device rd;
  return "tcp-test-" + std::to_string(rd()) + "-" + std::to_string(rd());
}

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
  if (!w || !test_util::connect_all(*w, 10)) return nullptr;
  return w;
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

}  // namespace zw::transport::tcp_test
