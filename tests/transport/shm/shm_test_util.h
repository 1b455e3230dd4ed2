// Helpers for the shm transport tests: random job ids, byte patterns, and a fully connected world of
// ranks-as-threads (each rank connects and waits from its own thread, as a communicator would).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/shm/shm_transport.h"
#include "transport/transport.h"

namespace zw::transport::shm_test {

inline std::string random_job_id() {
  std::random_device rd;
  return "t" + std::to_string(::getpid()) + "-" + std::to_string(rd()) + std::to_string(rd());
}

inline std::vector<std::byte> bytes_of(const std::string& text) {
  std::vector<std::byte> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<std::byte>(text[i]);
  return out;
}

inline std::string text_of(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// A deterministic pattern that differs per (seed, index), so misplaced bytes are caught.
inline std::byte pattern_byte(uint64_t seed, size_t i) {
  return static_cast<std::byte>((seed * 131 + i * 7 + (i >> 9)) & 0xff);
}

inline void fill_pattern(std::byte* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern_byte(seed, i);
}

// Index of the first byte that differs from the pattern, or n.
inline size_t first_mismatch(const std::byte* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern_byte(seed, i)) return i;
  return n;
}

inline Status status_of(const Result<bool>& r) { return r.ok() ? Status() : r.status(); }

struct World {
  std::string job_id;                                             // shared by all ranks
  std::vector<std::unique_ptr<Transport>> transports;             // by rank
  std::vector<std::string> addresses;                             // what each rank's listen() returned
  std::vector<std::vector<std::unique_ptr<Endpoint>>> endpoints;  // [rank][peer]; null on the diagonal
  Endpoint& ep(int from, int to) { return *endpoints[from][to]; }
};

// Creates n transports, listens, and connects every pair (one thread per rank).
inline void make_world(int n, World* w) {
  w->job_id = random_job_id();
  w->endpoints.resize(n);
  for (int r = 0; r < n; ++r) {
    TransportOptions options;
    options.rank = r;
    options.world_size = n;
    options.job_id = w->job_id;
    auto t = create_shm_transport(options);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto address = t.value()->listen();
    ASSERT_TRUE(address.ok()) << address.status().to_string();
    w->addresses.push_back(address.value());
    w->transports.push_back(std::move(t).value());
    w->endpoints[r].resize(n);
  }
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([w, r, n, &results] {
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        auto ep = w->transports[r]->connect(p, w->addresses[p]);
        if (!ep.ok()) {
          results[r] = ep.status();
          return;
        }
        w->endpoints[r][p] = std::move(ep).value();
      }
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        Status s = w->endpoints[r][p]->wait_connected(Deadline::after_seconds(10));
        if (!s.ok()) {
          results[r] = s;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].to_string();
}

// Polls `ep` (sleeping in the transport between attempts) until a message arrives or `seconds` pass.
inline Result<bool> poll_wait(Transport& t, Endpoint& ep, Message* out, double seconds = 10) {
  Deadline deadline = Deadline::after_seconds(seconds);
  for (;;) {
    auto got = ep.poll(out);
    if (!got.ok() || got.value() || deadline.expired()) return got;
    t.wait_for_activity(std::chrono::milliseconds(10));
  }
}

inline std::string segment_path(const std::string& address) {
  size_t at = address.find(";seg=/");
  if (at == std::string::npos) return "";
  size_t start = at + 5;  // the leading '/'
  return "/dev/shm" + address.substr(start, address.find(';', start) - start);
}

}  // namespace zw::transport::shm_test
