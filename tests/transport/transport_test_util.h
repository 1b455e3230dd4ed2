// Helpers shared by the transport backends' tests: ranks as transports of one process with every pair connected,
// byte patterns that expose data landing at the wrong offset, and polling with deadlines.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transport/transport.h"

#define ZW_ASSERT_OK(expr)                                                 \
  do {                                                                     \
    const auto& zw_value_ = (expr); /* extends a temporary's lifetime */   \
    const ::zw::Status& zw_status_ = ::zw::internal::as_status(zw_value_); \
    ASSERT_TRUE(zw_status_.ok()) << zw_status_.to_string();                \
  } while (0)

namespace zw::transport::test_util {

// Byte `i` of rank `rank`'s source pattern; a hash of the index, so bytes landing at the wrong offset show.
inline std::byte pattern(int rank, size_t i, uint32_t salt = 0) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(rank) << 56) ^ salt;
  x ^= x >> 29;
  return static_cast<std::byte>(x & 0xff);
}

inline void fill_pattern(std::vector<std::byte>& buf, int rank, uint32_t salt = 0) {
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(rank, i, salt);
}

// World of transports in this process: ep[r][p] is rank r's endpoint to rank p (null for r == p).
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

// Connects every pair of a world whose transports listen already (addresses filled); records a test failure
// and returns false when that fails.
inline bool connect_all(World& w, double seconds) {
  const int n = static_cast<int>(w.transports.size());
  w.ep.clear();
  w.ep.resize(static_cast<size_t>(n));
  for (auto& row : w.ep) row.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      auto e = w.t(r).connect(p, w.addresses[static_cast<size_t>(p)]);
      EXPECT_TRUE(e.ok()) << e.status().to_string();
      if (!e.ok()) return false;
      w.ep[static_cast<size_t>(r)][static_cast<size_t>(p)] = std::move(e).value();
    }
  }
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      Status st = w.e(r, p).wait_connected(Deadline::after_seconds(seconds));
      EXPECT_TRUE(st.ok()) << st.to_string();
      if (!st.ok()) return false;
    }
  }
  return true;
}

// Polls until a message arrives, the endpoint fails or the deadline passes; between empty polls it waits on
// `sleep_on` (null: spins, never sleeping — for tests of what a sleeping receiver must not miss).
inline Result<Message> poll_message(Endpoint& e, Deadline deadline, Transport* sleep_on) {
  Message m;
  for (;;) {
    Result<bool> got = e.poll(&m);
    if (!got.ok()) return got.status();
    if (*got) return m;
    if (deadline.expired()) return Status(Code::kTimeout, "no message from rank " + std::to_string(e.peer()));
    if (sleep_on != nullptr) sleep_on->wait_for_activity(std::chrono::milliseconds(20));
  }
}

inline Result<Message> next_message(Transport& t, Endpoint& e, Deadline deadline) {
  return poll_message(e, deadline, &t);
}

inline std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace zw::transport::test_util
