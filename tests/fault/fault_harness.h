// tests/fault/fault_harness.h — shared pieces of the fault suite (issue 20): ranks as threads with a configuration
// per rank, and the check that every rank of a failed operation failed quickly with an error naming what it must.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw::fault {

// What one rank saw: its creation or operation status and how long the operation took.
struct RankOutcome {
  Status status;
  double seconds = 0;
  bool created = false;
};

// Runs fn(rank, comm) on `n` threads, rank r's communicator made with config_of(r) over one in-memory store; a rank
// whose creation fails records that status (created = false) and skips fn. Returns one outcome per rank, holding
// fn's status and duration.
inline std::vector<RankOutcome> run_ranks_each(int n, const std::function<CommConfig(int)>& config_of,
                                               const std::function<Status(int, Communicator&)>& fn) {
  auto store = make_memory_store();
  std::vector<RankOutcome> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::create(store, r, n, config_of(r));
      if (!comm.ok()) {
        out[r].status = comm.status();
        return;
      }
      out[r].created = true;
      const auto start = std::chrono::steady_clock::now();
      out[r].status = fn(r, *comm.value());
      out[r].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// The status of an issued operation once finished (a usage error if it was refused at the call).
inline Status finish(const Result<Work>& w) { return w.ok() ? w.value().wait() : w.status(); }

}  // namespace zw::fault
