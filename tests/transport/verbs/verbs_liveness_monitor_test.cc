// The liveness monitor of the verbs transport (transport/verbs/verbs_liveness.h) on its own, over loopback TCP, with
// no RDMA device: a peer that says goodbye before closing is reported as left, one that closes without a goodbye as
// died, a hello that arrives in pieces still counts, and a connection with a bad hello (a stray client) is dropped
// without reporting anyone. The hello is parsed by LivenessReader (verbs_liveness_wire.h; fuzzed by
// tests/fuzz/fuzz_verbs_liveness).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/socket.h"
#include "transport/verbs/verbs_liveness.h"
#include "transport/verbs/verbs_liveness_wire.h"

namespace zw::transport::verbs {
namespace {

// What rank 1's monitor reported.
struct Reports {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int, bool>> got;  // (peer, died)
  LivenessMonitor::Callback callback() {
    return [this](int peer, bool died, const std::string&) {
      std::lock_guard<std::mutex> lock(mu);
      got.emplace_back(peer, died);
      cv.notify_all();
    };
  }
  // The first report within `seconds`, or (-1, false).
  std::pair<int, bool> first(double seconds) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return !got.empty(); });
    return got.empty() ? std::pair<int, bool>{-1, false} : got.front();
  }
};

// A raw client of rank 1's listener: sends `pieces` with a pause between them, then closes.
void client(const std::string& address, const std::vector<std::string>& pieces) {
  auto where = net::parse_host_port(address);
  ASSERT_TRUE(where.ok()) << where.status().to_string();
  auto fd = net::connect_tcp(*where, Deadline::after_seconds(10));
  ASSERT_TRUE(fd.ok()) << fd.status().to_string();
  for (const std::string& p : pieces) {
    ASSERT_TRUE(net::send_all(fd->get(), p.data(), p.size(), Deadline::after_seconds(10), "monitor").ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string hello(int rank) {
  const auto h = encode_liveness_hello(rank);
  return std::string(reinterpret_cast<const char*>(h.data()), h.size());
}

TEST(VerbsLivenessMonitor, AGoodbyeMeansLeftAndItsAbsenceDied) {
  Reports reports;
  auto m1 = LivenessMonitor::start(1, 2, "", reports.callback());
  ASSERT_TRUE(m1.ok()) << m1.status().to_string();
  {
    auto m0 = LivenessMonitor::start(0, 2, "", [](int, bool, const std::string&) {});
    ASSERT_TRUE(m0.ok()) << m0.status().to_string();
    ASSERT_TRUE((*m0)->connect(1, (*m1)->address(), Deadline::after_seconds(10)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }  // rank 0 shuts down in order: goodbye, then close
  EXPECT_EQ(reports.first(5), (std::pair<int, bool>{0, false}));
}

TEST(VerbsLivenessMonitor, AHelloInPiecesThenACloseWithoutGoodbyeIsDied) {
  Reports reports;
  auto m1 = LivenessMonitor::start(1, 2, "", reports.callback());
  ASSERT_TRUE(m1.ok()) << m1.status().to_string();
  const std::string h = hello(0);
  client((*m1)->address(), {h.substr(0, 3), h.substr(3), "xyz"});
  EXPECT_EQ(reports.first(5), (std::pair<int, bool>{0, true}));
}

TEST(VerbsLivenessMonitor, AGoodbyeInTheSamePacketAsTheHelloCounts) {
  Reports reports;
  auto m1 = LivenessMonitor::start(1, 2, "", reports.callback());
  ASSERT_TRUE(m1.ok()) << m1.status().to_string();
  client((*m1)->address(), {hello(0) + "B"});
  EXPECT_EQ(reports.first(5), (std::pair<int, bool>{0, false}));
}

TEST(VerbsLivenessMonitor, ABadHelloIsDroppedWithoutNamingAnyone) {
  Reports reports;
  auto m1 = LivenessMonitor::start(1, 3, "", reports.callback());
  ASSERT_TRUE(m1.ok()) << m1.status().to_string();
  std::string wrong_magic = hello(0);
  wrong_magic[0] ^= 1;
  client((*m1)->address(), {wrong_magic});
  client((*m1)->address(), {hello(1)});  // not a lower rank
  client((*m1)->address(), {hello(2)});
  client((*m1)->address(), {"BBBB"});  // a goodbye before any hello is no hello
  EXPECT_EQ(reports.first(0.5).first, -1);
}

}  // namespace
}  // namespace zw::transport::verbs
