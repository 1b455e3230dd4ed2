// collectives/monitor/straggler.h — naming the rank that arrives last at the collectives, consistently.
//
// A rank that starts an operation late finds its peers already waiting, so its run time (start to end) is the
// shortest: all ranks of a collective finish within a message's time of each other, and each starts when its
// caller gets there. So for every collective, the rank with the shortest run time arrived last, by about the
// difference to the next-shortest. Rank 0 asks, through the store, for one window of collectives at a time; every
// rank keeps its run times of that window (no extra message per operation) and publishes them, and rank 0 judges the
// window (comm_monitor.cc has the exchange): a rank that arrived last in at least `share` of the window's operations,
// with a median lateness of at least `min_late_ns`, is named in a WARN line and in the metrics.
//
// Why not the arrival times of peers' first messages: in ring and tree algorithms a rank blocked on the late
// one forwards the lateness, so its own neighbours see it "arrive" late too and would blame it; run times compared
// across all ranks point at the one that started late.
// Non-goals: point-to-point batches (only some ranks take part), clocks across hosts (only durations are compared).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zw::internal::monitor {

struct StragglerVerdict {
  uint64_t window = 0;                 // window index (collectives [window·W, (window+1)·W))
  uint64_t ops = 0;                    // operations judged
  int named = -1;                      // the rank named, or -1
  std::vector<double> last_share;      // [rank] share of the window's operations this rank arrived last at
  std::vector<double> median_late_ns;  // [rank] median lateness when it was last (0 if never)
};

// Judges one window: durations_us[rank][i] is rank's run time of the window's i-th collective, in µs.
StragglerVerdict judge_window(const std::vector<std::vector<uint32_t>>& durations_us, double share, double min_late_ns);

// The store value of one rank's window (little-endian uint32 per operation), and back; false on a malformed value.
std::string encode_durations(const uint32_t* us, size_t n);
bool decode_durations(const std::string& value, size_t n, std::vector<uint32_t>* out);

}  // namespace zw::internal::monitor
