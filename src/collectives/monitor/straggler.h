// collectives/monitor/straggler.h — naming the rank that arrives last at the collectives, consistently.
//
// A rank that starts an operation late finds its peers already waiting, so its run time (start to end) is the
// shortest: all ranks of a collective finish within a message's time of each other, and each starts when its
// caller gets there. So for every collective, the rank with the shortest run time arrived last, by about the
// difference to the next-shortest. Rank 0 asks, through the store, for one window of collectives at a time; every
// rank keeps its run times of that window (no extra message per operation) and publishes them, and rank 0 judges the
// window (StragglerExchange below): a rank that arrived last in at least `share` of the window's operations, with a
// median lateness of at least `min_late_ns`, is named in a WARN line and in the metrics.
//
// Why not the arrival times of peers' first messages: in ring and tree algorithms a rank blocked on the late
// one forwards the lateness, so its own neighbours see it "arrive" late too and would blame it; run times compared
// across all ranks point at the one that started late.
// Non-goals: point-to-point batches (only some ranks take part), clocks across hosts (only durations are compared).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zerowire/store.h"

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

// Who a communicator's ranks are, for the exchange and its WARN line.
struct StragglerPeers {
  int rank = 0;
  int size = 1;
  std::vector<std::string> hosts;  // [rank]
  std::vector<int> pids;           // [rank]
  std::string comm;                // the communicator's label
};

// One rank's part of the straggler exchange of a communicator. Which windows are judged is rank 0's choice, told
// through the store's counter `monitor/straggler/ask` (the window + 1): every rank captures that window's run times
// as its counting reaches it, publishes them, and rank 0 judges once all are there, then asks for another. So every
// rank publishes the same windows whatever the operations' rate (a window of 1,000 4 KiB all-gathers lasts ~2 ms, a
// tick 50 ms), and the store sees a few requests per rank per tick: the others read the counter while they have
// nothing to capture, and set one key per window.
//
// Threading: count() is the counting's (its caller holds `count_mutex`, the lock the capture shares with the
// counting); tick() is the service thread's; the readers (verdict, judged, missed) may run on any thread. No store
// request waits for a key, so that a tick stays short.
class StragglerExchange {
 public:
  // Windows of `window` collectives; `store` is the communicator's own (prefixed).
  StragglerExchange(StragglerPeers peers, size_t window, std::shared_ptr<Store> store, std::mutex& count_mutex);

  // Counting (under count_mutex): the collective `coll_index` ran `run_ns`, or failed (no window is judged after a
  // failed collective: its peers stopped in step with it, or never will).
  void count(uint64_t coll_index, uint64_t run_ns, bool failed);

  // Service thread, every 50 ms: publishes a finished capture; rank 0 judges the window it asked for once every rank
  // published it (or gives up on it), then asks for the next; the others follow the ask.
  void tick();

  size_t window() const { return window_; }
  // Rank 0: the last window judged; the windows judged, and those asked for that could not be (a rank's capture
  // missed, or its window never came).
  StragglerVerdict verdict() const;
  uint64_t judged() const { return judged_.load(std::memory_order_relaxed); }
  uint64_t missed() const { return missed_.load(std::memory_order_relaxed); }

 private:
  // The run times (µs) of window `window` (collectives window·window_ .. (window+1)·window_ − 1), the one rank 0
  // asked for; the counting fills it in order, and a gap (a record lost, or the window counted before the capture
  // began) marks it missed.
  struct Capture {
    int64_t window = -1;  // -1: none
    size_t fill = 0;
    bool missed = false;
    std::vector<uint32_t> runs;  // window_ entries
  };
  void start_capture(int64_t window);
  Capture take_capture();
  uint64_t colls_counted() const;
  void publish(const Capture& c);
  void follow_ask();
  void drive_judge();
  void ask_next();
  void judge_asked();
  std::string window_key(uint64_t window, int rank) const;

  const StragglerPeers peers_;
  const size_t window_;
  const std::shared_ptr<Store> store_;
  // Counting state (under count_mutex_).
  std::mutex& count_mutex_;
  Capture capture_;
  uint64_t next_coll_ = 0;        // the collective index after the last one counted
  bool windows_stopped_ = false;  // after the first failed collective
  // Exchange state (service thread).
  int64_t asked_ = -1;       // the window asked for (rank 0) or last seen asked (others)
  bool asked_open_ = false;  // rank 0: `asked_` is not yet judged or given up
  bool published_ = false;   // this rank is done with `asked_` (published its capture, or dropped it)
  int64_t ask_value_ = 0;    // rank 0: the ask counter's value (asked_ + 1 once asked)
  int ticks_waited_ = 0;     // rank 0: ticks since it published its own capture of `asked_`
  int misses_in_row_ = 0;    // rank 0: the lead doubles with each window missed in a row
  uint64_t rate_colls_ = 0;  // rank 0: colls_counted() at the last tick
  int64_t rate_ns_ = 0;      //         and when
  double rate_ = 0;          //         collectives per second since the tick before
  std::atomic<uint64_t> judged_{0}, missed_{0};
  mutable std::mutex verdict_mutex_;
  StragglerVerdict verdict_;  // rank 0: the last window judged
};

}  // namespace zw::internal::monitor
