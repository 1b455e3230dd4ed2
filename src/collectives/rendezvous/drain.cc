// After a failure, the failed operation returns only once no peer can still write into its buffers.
//
// A peer that has not seen the failure yet goes on sending the operation's data; over tcp its frames land in the
// receiver's registered buffers from the transport's reader thread. If the failed call returned at once, its caller
// could free those buffers first and the late frames would write into freed memory (SIGSEGV in the tcp reader in 2 of
// ~100 kill trials of tests/fault). So the failing rank, once it told its peers (ABORT), waits until every peer is
// accounted for: it aborted too (its ABORT message comes after everything it sent before, on the same link), its link
// failed, the transport knows it dead, or /proc shows it stopped on this host — at most kDrainMax, which bounds what a
// rank stuck elsewhere adds to the failure's latency.
// Non-goals: a peer that stays silent beyond kDrainMax and later resumes sending (a continued SIGSTOP) is not covered.
#include <algorithm>
#include <thread>

#include "collectives/rendezvous/rendezvous.h"

namespace zw::internal {
namespace {
constexpr double kDrainMax = 0.5;  // seconds
}  // namespace

void Rendezvous::drain_after_failure() {
  const auto until = Clock::now() + std::chrono::duration<double>(kDrainMax);
  const std::vector<int> stopped = stopped_local_ranks();
  for (;;) {
    (void)pump();  // errors are expected now (the peers' aborts); each call goes on after the message that failed
    bool all = true;
    for (size_t p = 0; p < state_.size() && all; ++p) {
      if (static_cast<int>(p) == rank_ || !endpoints_[p] || state_[p].aborted || !state_[p].error.ok()) continue;
      std::string why;
      if (transport_.peer_known_dead(static_cast<int>(p), &why)) continue;
      if (std::find(stopped.begin(), stopped.end(), static_cast<int>(p)) != stopped.end()) continue;
      all = false;
    }
    if (all || Clock::now() >= until) return;
    transport_.wait_for_activity(std::chrono::microseconds(2000));
  }
}

}  // namespace zw::internal
