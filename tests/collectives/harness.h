// Test harness for collectives: ranks as threads over an in-memory store, typed test data whose reductions
// are exact in every summation order, and a serial reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/data_pattern.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw::test {

using namespace zw::pattern;  // NOLINT(google-build-using-namespace): test-only shorthand

// Runs fn(rank, comm) on `n` threads, each with its own communicator over one in-memory store.
inline void run_ranks(int n, const CommConfig& config, const std::function<void(int, Communicator&)>& fn) {
  auto store = make_memory_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::create(store, r, n, config);
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status().to_string();
      fn(r, *comm.value());
    });
  }
  for (auto& t : threads) t.join();
}

inline std::vector<std::pair<DataType, ReduceOp>> all_reduction_pairs() {
  std::vector<std::pair<DataType, ReduceOp>> out;
  for (int d = 0; d < kNumDataTypes; ++d)
    for (int o = 0; o < kNumReduceOps; ++o)
      if (reduce_op_supported(static_cast<DataType>(d), static_cast<ReduceOp>(o)))
        out.emplace_back(static_cast<DataType>(d), static_cast<ReduceOp>(o));
  return out;
}

constexpr uint8_t kPoison = 0xA5;

}  // namespace zw::test
