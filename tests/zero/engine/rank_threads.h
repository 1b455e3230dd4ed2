// tests/zero/engine/rank_threads.h — ranks as threads over one in-memory store, each with its own communicator
// and its log prefix set to its rank (the pattern of tests/collectives/harness.h).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/log.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw::zero::testing {

inline void run_ranks(int n, const std::function<void(int, Communicator&)>& fn) {
  auto store = make_memory_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      log::set_thread_rank(r);
      CommConfig config;
      config.transport = "shm";
      auto comm = Communicator::create(store, r, n, config);
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status().to_string();
      fn(r, *comm.value());
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace zw::zero::testing
