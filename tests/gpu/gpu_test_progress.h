// tests/gpu/gpu_test_progress.h — where a ranks-as-threads GPU test spends its time, and where it is stuck.
//
// CaseProgress follows the rank threads of one world through their cases: each thread says which case it starts
// and which stage it enters (inputs, issue, download, wait, verify). It prints, on stdout and flushed at once:
//   - always, one summary line per world (report()): cases, wall time, rank 0's time per stage, the slowest case;
//   - with ZW_TEST_PROGRESS=1, a line per case from rank 0 (its time per stage, the world's time so far);
//   - always, from a watchdog thread, every rank's case and stage when no rank has finished a case for `stall_s`
//     seconds, repeated every `stall_s`: a stall the communicator's timeout will end (the error follows), or a hang
//     (the same stages keep being reported). So a run cut short by a timeout still tells where it was.
// Threading: begin/stage/end/leave from each rank's own thread; report() after the rank threads have joined.
// Non-goals: timing precise enough for performance claims (use the benchmarks).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tests/gpu/gpu_test_util.h"

namespace zw::gpu_test {

class CaseProgress {
 public:
  enum Stage : int { kSetup, kInputs, kIssue, kDownload, kWait, kVerify, kLeft, kNumStages };

  // `world` names the world in every line ("n8"); `describe(i)` names case i.
  CaseProgress(std::string world, int ranks, size_t cases, double stall_s, std::function<std::string(size_t)> describe)
      : world_(std::move(world)),
        ranks_(ranks),
        cases_(cases),
        stall_ns_(static_cast<int64_t>(stall_s * 1e9)),
        describe_(std::move(describe)),
        verbose_(env_or("ZW_TEST_PROGRESS", "0") != "0"),
        rank_(new Rank[static_cast<size_t>(ranks)]),
        start_ns_(now_ns()),
        last_done_ns_(start_ns_) {
    for (int r = 0; r < ranks_; ++r) rank_[r].since_ns = start_ns_;
    watchdog_ = std::thread([this] { watch(); });
  }
  ~CaseProgress() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }
  CaseProgress(const CaseProgress&) = delete;
  CaseProgress& operator=(const CaseProgress&) = delete;

  void begin(int r, size_t i) {
    enter(r, kInputs);
    Rank& k = rank_[r];
    for (double& t : k.case_s) t = 0;
    k.case_index = i;
  }
  void stage(int r, Stage s) { enter(r, s); }
  void end(int r, size_t i) {
    Rank& k = rank_[r];
    enter(r, kSetup);  // between cases: counted as setup, reset by the next begin()
    k.case_s[kSetup] = 0;
    double total = 0;
    for (double t : k.case_s) total += t;
    if (total > k.slowest_s) {
      k.slowest_s = total;
      k.slowest = i;
    }
    ++k.done;
    last_done_ns_ = now_ns();
    if (verbose_ && r == 0)
      print("[%s] case %zu/%zu %.2f ms: inputs %.2f issue %.2f download %.2f wait %.2f verify %.2f | %.1f s | %s\n",
            world_.c_str(), i + 1, cases_, total * 1e3, k.case_s[kInputs] * 1e3, k.case_s[kIssue] * 1e3,
            k.case_s[kDownload] * 1e3, k.case_s[kWait] * 1e3, k.case_s[kVerify] * 1e3, seconds_since(start_ns_),
            describe_(i).c_str());
  }
  void leave(int r) { enter(r, kLeft); }

  // One line: the world's cases, wall time and rank 0's time per stage. Call after the rank threads joined.
  void report() const {
    const Rank& k = rank_[0];
    const std::string slowest =
        k.slowest < cases_ ? "case " + std::to_string(k.slowest + 1) + " " + describe_(k.slowest) : "none";
    print(
        "[%s] %zu of %zu cases on rank 0 in %.2f s: setup %.2f inputs %.2f issue %.2f download %.2f wait %.2f "
        "verify %.2f s; slowest %.1f ms: %s\n",
        world_.c_str(), k.done, cases_, seconds_since(start_ns_), k.total_s[kSetup], k.total_s[kInputs],
        k.total_s[kIssue], k.total_s[kDownload], k.total_s[kWait], k.total_s[kVerify], k.slowest_s * 1e3,
        slowest.c_str());
  }

 private:
  struct Rank {
    std::atomic<size_t> case_index{SIZE_MAX};  // the case it works on (SIZE_MAX before the first)
    std::atomic<int> stage{kSetup};            // where in it
    std::atomic<int64_t> since_ns{0};          // since when
    double case_s[kNumStages] = {};            // this case's time per stage (own thread only)
    double total_s[kNumStages] = {};           // every case's (own thread only; read after join)
    double slowest_s = 0;
    size_t slowest = SIZE_MAX;
    size_t done = 0;
  };

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static double seconds_since(int64_t t) { return static_cast<double>(now_ns() - t) * 1e-9; }
  template <class... A>
  static void print(const char* format, A... args) {
    static std::mutex out;
    std::lock_guard<std::mutex> lock(out);
    std::printf(format, args...);
    std::fflush(stdout);
  }

  void enter(int r, Stage s) {
    Rank& k = rank_[r];
    const int64_t now = now_ns();
    const double dt = static_cast<double>(now - k.since_ns.load()) * 1e-9;
    const int from = k.stage.load();
    k.case_s[from] += dt;
    k.total_s[from] += dt;
    k.stage = s;
    k.since_ns = now;
  }

  void watch() {
    static const char* names[kNumStages] = {"setup",
                                            "inputs",
                                            "issue (upload, exchange, launch)",
                                            "download (GPU: the collective kernel)",
                                            "Work::wait",
                                            "verify",
                                            "left (done or failed)"};
    int64_t last_report = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return stop_; })) {
      const int64_t now = now_ns(), quiet = now - last_done_ns_;
      if (quiet < stall_ns_ || now - last_report < stall_ns_) continue;
      last_report = now;
      std::string text = "[" + world_ + "] stalled: no case finished for " + std::to_string(quiet / 1000000000) +
                         " s (" + std::to_string(ranks_) + " ranks)\n";
      for (int r = 0; r < ranks_; ++r) {
        const Rank& k = rank_[r];
        const size_t i = k.case_index;
        const int s = k.stage;
        text +=
            "  rank " + std::to_string(r) + ": " +
            (i < cases_ ? "case " + std::to_string(i + 1) + " (" + describe_(i) + ")" : std::string("no case yet")) +
            ", " + names[s] + " for " + std::to_string((now - k.since_ns) / 1000000) + " ms\n";
      }
      print("%s", text.c_str());
    }
  }

  const std::string world_;
  const int ranks_;
  const size_t cases_;
  const int64_t stall_ns_;
  const std::function<std::string(size_t)> describe_;
  const bool verbose_;
  std::unique_ptr<Rank[]> rank_;
  const int64_t start_ns_;
  std::atomic<int64_t> last_done_ns_;
  std::mutex mutex_;  // guards stop_
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace zw::gpu_test
