// Helpers of the verbs transport tests: ranks as threads of one process over the first RDMA device (each rank
// opens its own device context), every pair connected, byte patterns, and polling with deadlines.
// Without an RDMA device the tests skip with the reason (ZW_SKIP_WITHOUT_RDMA).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/verbs/verbs_config.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_transport.h"

namespace zw::transport::verbs_test {

#define ZW_ASSERT_OK(expr)                                                 \
  do {                                                                     \
    const auto& zw_value_ = (expr); /* extends a temporary's lifetime */   \
    const ::zw::Status& zw_status_ = ::zw::internal::as_status(zw_value_); \
    ASSERT_TRUE(zw_status_.ok()) << zw_status_.to_string();                \
  } while (0)

#define ZW_SKIP_WITHOUT_RDMA()                                                          \
  do {                                                                                  \
    std::string zw_why_ = ::zw::transport::verbs::rdma_unavailable_reason();            \
    if (!zw_why_.empty()) GTEST_SKIP() << "no RDMA device: " << zw_why_;                \
  } while (0)

// Byte `i` of rank `rank`'s source pattern; a hash of the index, so bytes landing at the wrong offset show.
inline std::byte pattern(int rank, size_t i, uint32_t salt = 0) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(rank) << 56) ^ salt;
  x ^= x >> 29;
  return static_cast<std::byte>(x & 0xff);
}

inline void fill_pattern(std::vector<std::byte>& buf, int rank, uint32_t salt = 0) {
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(rank, i, salt);
}

// World of transports in this process, every pair connected: e(r, p) is rank r's endpoint to rank p.
struct World {
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

// Creates and fully connects a world; null (with a test failure recorded) when that failed.
inline std::unique_ptr<World> make_world(int world_size, const verbs::VerbsConfig& config = verbs::verbs_config()) {
  auto w = std::make_unique<World>();
  for (int r = 0; r < world_size; ++r) {
    TransportOptions o;
    o.rank = r;
    o.world_size = world_size;
    o.job_id = "verbs-test";
    auto t = create_verbs_transport(o, config);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return nullptr;
    auto address = (*t)->listen();
    EXPECT_TRUE(address.ok()) << address.status().to_string();
    if (!address.ok()) return nullptr;
    w->addresses.push_back(*address);
    w->transports.push_back(std::move(t).value());
  }
  w->ep.resize(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    w->ep[static_cast<size_t>(r)].resize(static_cast<size_t>(world_size));
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
      Status st = w->e(r, p).wait_connected(Deadline::after_seconds(30));
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

// Polls `e` until every posted write completed locally.
inline Status wait_writes_completed(Endpoint& e, Deadline deadline) {
  Message m;
  while (e.writes_completed() < e.writes_posted()) {
    Result<bool> got = e.poll(&m);  // drives the CQ
    if (!got.ok()) return got.status();
    if (*got) return Status(Code::kInternal, "unexpected message while waiting for local completions");
    if (deadline.expired()) return Status(Code::kTimeout, "writes did not complete locally");
  }
  return Status();
}

inline std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace zw::transport::verbs_test
