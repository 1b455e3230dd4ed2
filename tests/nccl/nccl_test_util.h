// Shared by the libzwnccl tests: ranks as threads through NCCL's C API (one ncclGetUniqueId, every thread calls
// ncclCommInitRank), and NCCL result checks that print ncclGetLastError.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "nccl.h"

namespace zw::nccl_test {

#define EXPECT_NCCL_OK(call)                                                                         \
  do {                                                                                               \
    ncclResult_t r_ = (call);                                                                        \
    EXPECT_EQ(r_, ncclSuccess) << #call << ": " << ncclGetErrorString(r_) << ": " << ncclGetLastError(nullptr); \
  } while (0)

// Runs fn(rank, comm) on n threads, each with its communicator from one unique id; destroys them after.
inline void run_ranks(int n, const std::function<void(int, ncclComm_t)>& fn) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      ncclResult_t res = ncclCommInitRank(&comm, n, id, r);
      ASSERT_EQ(res, ncclSuccess) << "rank " << r << ": " << ncclGetLastError(nullptr);
      fn(r, comm);
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace zw::nccl_test
