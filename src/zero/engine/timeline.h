// zero/engine/timeline.h — an optional per-rank record of what the ZeRO-3 engine did when: every all-gather and
// reduce-scatter it issued (issue time, when the communicator actually ran it, when the engine waited for it) and
// every compute span of a unit (from the fetch that returned it to its release), written as Chrome trace-event
// JSON (chrome://tracing, Perfetto) together with the overlap figures computed from the spans (overlap()).
//
// Times are steady-clock nanoseconds (CLOCK_MONOTONIC, one clock for every process of a host, so the files of
// several ranks line up). A collective's "run" interval is the one the communicator reports (Work::timing(): from
// the moment the thread running it started it to its completion, queueing excluded); when it reports none (polled
// GPU operations) the interval falls back to issue .. the moment the engine observed completion, and the span says
// so (run_source). On the engine's device path (stream_spans.h) every span is device time instead: a collective's
// run interval and a unit's compute span come from CUDA events on the communication and compute streams
// (run_source "device"), converted to the same steady clock. The figures:
//   hidden fraction (per kind) = |in flight ∩ compute| / |in flight|, where "in flight" is the union of the kind's
//   run intervals and "compute" the union of compute spans;
//   blocked = |union of the intervals during which the engine waited for a collective|.
// Cost: the engine holds a null Timeline pointer when EngineOptions::timeline is off (one branch per event).
// Threading: one thread (the engine's) records. Non-goals: spans of the optimizer step's small collectives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zerowire/communicator.h"
#include "zerowire/status.h"

namespace zw::zero {

enum class SpanKind { kForward, kBackward, kAllGather, kReduceScatter };

struct Span {
  SpanKind kind = SpanKind::kForward;
  int unit = -1;              // unit id (a reduce-scatter: the first unit of its bucket)
  int units = 1;              // units the operation carries (a bucket may hold several)
  int64_t bytes = 0;          // collectives: all ranks' bytes (the gathered unit, the whole bucket)
  int64_t issue_ns = 0;       // compute: start; collectives: when the engine issued it
  int64_t start_ns = 0;       // compute: start; collectives: when it started running
  int64_t end_ns = 0;         // compute: end; collectives: when it completed (0: not completed yet)
  int64_t wait_begin_ns = 0;  // collectives: the engine started waiting for it (0: never waited)
  int64_t wait_end_ns = 0;    // collectives: the engine stopped waiting
  bool run_reported = false;  // collectives: start/end are the communicator's (else issue .. observed completion)
  bool device_timed = false;  // start/end are CUDA event times on a stream (the engine's device path)
};

struct KindOverlap {
  int64_t ops = 0;       // operations recorded
  double comm_s = 0;     // |union of run intervals|
  double hidden_s = 0;   // |union of run intervals ∩ union of compute spans|
  double fraction = 0;   // hidden_s / comm_s (0 when comm_s is 0)
  double blocked_s = 0;  // |union of the engine's waits for this kind|
};

struct OverlapFigures {
  KindOverlap all_gather;
  KindOverlap reduce_scatter;
  double compute_s = 0;  // |union of compute spans|
  double blocked_s = 0;  // |union of all waits| (the compute thread blocked on communication)
};

// The interval arithmetic of the figures above, over any span set.
OverlapFigures overlap(const std::vector<Span>& spans);

class Timeline {
 public:
  explicit Timeline(int rank) : rank_(rank) {}

  // A collective was issued now; returns its id for the calls below.
  int issued(SpanKind kind, int unit, int units, int64_t bytes);
  // The engine waits for collective `id` between t0 and t1 (steady ns); it finished by t1.
  void waited(int id, int64_t t0, int64_t t1);
  // Collective `id` is known complete at `observed_ns`; `work` says when it ran (if it can).
  void completed(int id, const Work& work, int64_t observed_ns);
  // Collective `id` ran on the device between t0 and t1 (CUDA events, steady ns; stream_spans.h).
  void device_ran(int id, int64_t t0, int64_t t1);
  // Unit `unit` computed between t0 and t1 (host clock, or device time where `device` is set).
  void compute(int unit, bool backward, int64_t t0, int64_t t1, bool device = false);

  const std::vector<Span>& spans() const { return spans_; }
  int rank() const { return rank_; }
  // Chrome trace-event JSON: {"traceEvents": [...], "otherData": {rank, clock, definitions, figures}}.
  std::string chrome_json() const;
  Status write_chrome_json(const std::string& path) const;

  static int64_t now_ns();

 private:
  int rank_ = 0;
  std::vector<Span> spans_;
};

}  // namespace zw::zero
