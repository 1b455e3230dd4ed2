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
#include "tests/transport/transport_test_util.h"
#include "transport/verbs/verbs_config.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_transport.h"

namespace zw::transport::verbs_test {

using test_util::bytes_of;
using test_util::fill_pattern;
using test_util::next_message;
using test_util::pattern;
using test_util::World;

#define ZW_SKIP_WITHOUT_RDMA()                                                          \
  do {                                                                                  \
    std::string zw_why_ = ::zw::transport::verbs::rdma_unavailable_reason();            \
    if (!zw_why_.empty()) GTEST_SKIP() << "no RDMA device: " << zw_why_;                \
  } while (0)

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
  if (!test_util::connect_all(*w, 30)) return nullptr;
  return w;
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

}  // namespace zw::transport::verbs_test
