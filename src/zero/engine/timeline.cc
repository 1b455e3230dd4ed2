// zero/engine/timeline.cc — span recording, the interval arithmetic of the overlap figures and the Chrome trace JSON.
//
// Non-goals: see timeline.h.
#include "zero/engine/timeline.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

namespace zw::zero {
namespace {

struct Interval {
  int64_t b = 0, e = 0;  // [b, e)
};

// Sorted, disjoint union of the non-empty intervals.
std::vector<Interval> merge(std::vector<Interval> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return i.e <= i.b; }), v.end());
  std::sort(v.begin(), v.end(), [](const Interval& x, const Interval& y) { return x.b < y.b; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.b <= out.back().e)
      out.back().e = std::max(out.back().e, i.e);
    else
      out.push_back(i);
  }
  return out;
}

int64_t length(const std::vector<Interval>& merged) {
  int64_t n = 0;
  for (const Interval& i : merged) n += i.e - i.b;
  return n;
}

// |a ∩ b| of two merged interval lists.
int64_t intersection(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].b, b[j].b), hi = std::min(a[i].e, b[j].e);
    if (hi > lo) n += hi - lo;
    if (a[i].e < b[j].e)
      ++i;
    else
      ++j;
  }
  return n;
}

bool is_comm(SpanKind k) { return k == SpanKind::kAllGather || k == SpanKind::kReduceScatter; }

const char* kind_name(SpanKind k) {
  switch (k) {
    case SpanKind::kForward:
      return "forward";
    case SpanKind::kBackward:
      return "backward";
    case SpanKind::kAllGather:
      return "all-gather";
    case SpanKind::kReduceScatter:
      return "reduce-scatter";
  }
  return "?";
}

KindOverlap kind_overlap(const std::vector<Span>& spans, SpanKind kind, const std::vector<Interval>& compute) {
  std::vector<Interval> run, waits;
  KindOverlap k;
  for (const Span& s : spans) {
    if (s.kind != kind) continue;
    ++k.ops;
    if (s.end_ns > 0) run.push_back({s.start_ns, s.end_ns});
    if (s.wait_begin_ns > 0) waits.push_back({s.wait_begin_ns, s.wait_end_ns});
  }
  const std::vector<Interval> r = merge(std::move(run));
  k.comm_s = double(length(r)) * 1e-9;
  k.hidden_s = double(intersection(r, compute)) * 1e-9;
  k.fraction = k.comm_s > 0 ? k.hidden_s / k.comm_s : 0.0;
  k.blocked_s = double(length(merge(std::move(waits)))) * 1e-9;
  return k;
}

nlohmann::json kind_json(const KindOverlap& k) {
  return {{"ops", k.ops},
          {"comm_s", k.comm_s},
          {"hidden_s", k.hidden_s},
          {"hidden_fraction", k.fraction},
          {"blocked_s", k.blocked_s}};
}

}  // namespace

OverlapFigures overlap(const std::vector<Span>& spans) {
  std::vector<Interval> compute, waits;
  for (const Span& s : spans) {
    if (!is_comm(s.kind))
      compute.push_back({s.start_ns, s.end_ns});
    else if (s.wait_begin_ns > 0)
      waits.push_back({s.wait_begin_ns, s.wait_end_ns});
  }
  const std::vector<Interval> c = merge(std::move(compute));
  OverlapFigures f;
  f.all_gather = kind_overlap(spans, SpanKind::kAllGather, c);
  f.reduce_scatter = kind_overlap(spans, SpanKind::kReduceScatter, c);
  f.compute_s = double(length(c)) * 1e-9;
  f.blocked_s = double(length(merge(std::move(waits)))) * 1e-9;
  return f;
}

int64_t Timeline::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int Timeline::issued(SpanKind kind, int unit, int units, int64_t bytes) {
  Span s;
  s.kind = kind;
  s.unit = unit;
  s.units = units;
  s.bytes = bytes;
  s.issue_ns = now_ns();
  spans_.push_back(s);
  return int(spans_.size()) - 1;
}

void Timeline::waited(int id, int64_t t0, int64_t t1) {
  if (id < 0 || size_t(id) >= spans_.size()) return;
  Span& s = spans_[size_t(id)];
  if (s.wait_begin_ns == 0) s.wait_begin_ns = t0;  // a second wait (already complete) keeps the first
  s.wait_end_ns = std::max(s.wait_end_ns, t1);
}

void Timeline::completed(int id, const Work& work, int64_t observed_ns) {
  if (id < 0 || size_t(id) >= spans_.size()) return;
  Span& s = spans_[size_t(id)];
  if (s.end_ns > 0) return;
  const OpTiming t = work.timing();
  s.run_reported = t.end_ns > 0;
  s.start_ns = s.run_reported ? t.start_ns : s.issue_ns;
  s.end_ns = s.run_reported ? t.end_ns : observed_ns;
}

void Timeline::device_ran(int id, int64_t t0, int64_t t1) {
  if (id < 0 || size_t(id) >= spans_.size()) return;
  Span& s = spans_[size_t(id)];
  s.start_ns = t0;
  s.end_ns = t1;
  s.run_reported = true;
  s.device_timed = true;
}

void Timeline::compute(int unit, bool backward, int64_t t0, int64_t t1, bool device) {
  Span s;
  s.device_timed = device;
  s.kind = backward ? SpanKind::kBackward : SpanKind::kForward;
  s.unit = unit;
  s.issue_ns = s.start_ns = t0;
  s.end_ns = t1;
  spans_.push_back(s);
}

std::string Timeline::chrome_json() const {
  nlohmann::json events = nlohmann::json::array();
  const char* threads[] = {"compute", "all-gather", "reduce-scatter"};
  for (int t = 0; t < 3; ++t)
    events.push_back(
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank_}, {"tid", t}, {"args", {{"name", threads[t]}}}});
  events.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", rank_}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  auto us = [](int64_t ns) { return double(ns) * 1e-3; };
  int64_t reported = 0, observed = 0;
  for (const Span& s : spans_) {
    const bool comm = is_comm(s.kind);
    const int tid = !comm ? 0 : s.kind == SpanKind::kAllGather ? 1 : 2;
    const std::string name = std::string(kind_name(s.kind)) + " u" + std::to_string(s.unit);
    nlohmann::json args = {{"unit", s.unit}};
    if (comm) {
      args.update({{"units", s.units},
                   {"bytes", s.bytes},
                   {"issue_us", us(s.issue_ns)},
                   {"start_us", us(s.start_ns)},
                   {"end_us", us(s.end_ns)},
                   {"queued_us", us(s.start_ns - s.issue_ns)},
                   {"run_source", s.device_timed ? "device" : s.run_reported ? "communicator" : "engine-observed"}});
      ++(s.run_reported ? reported : observed);
      if (s.wait_begin_ns > 0) {
        args.update({{"wait_begin_us", us(s.wait_begin_ns)}, {"wait_end_us", us(s.wait_end_ns)}});
        events.push_back({{"name", "wait " + name},
                          {"cat", "wait"},
                          {"ph", "X"},
                          {"pid", rank_},
                          {"tid", 0},
                          {"ts", us(s.wait_begin_ns)},
                          {"dur", us(s.wait_end_ns - s.wait_begin_ns)},
                          {"args", {{"unit", s.unit}, {"op", kind_name(s.kind)}}}});
      }
    }
    events.push_back({{"name", name},
                      {"cat", kind_name(s.kind)},
                      {"ph", "X"},
                      {"pid", rank_},
                      {"tid", tid},
                      {"ts", us(s.start_ns)},
                      {"dur", us(s.end_ns - s.start_ns)},
                      {"args", args}});
  }
  const OverlapFigures f = overlap(spans_);
  nlohmann::json meta = {
      {"rank", rank_},
      {"clock", "steady_clock (CLOCK_MONOTONIC) microseconds; the same clock in every process of a host"},
      {"completion",
       "collective spans run from when the communicator's thread started the operation to its completion "
       "(Work::timing, queueing excluded; run_source \"communicator\"); where it reports none, from issue to "
       "the engine's observation of completion (run_source \"engine-observed\"); on the engine's device path, "
       "from CUDA events on the communication stream around the operation (run_source \"device\")"},
      {"spans_run_source_communicator", reported},
      {"spans_run_source_engine_observed", observed},
      {"compute", "a unit's compute span: from the engine's fetch returning it to its release (forward/backward); "
                  "on the device path, CUDA events on the compute stream at fetch and release"},
      {"hidden_fraction_definition",
       "|union of the kind's collective spans ∩ union of compute spans| / |union of the kind's collective spans|"},
      {"all_gather", kind_json(f.all_gather)},
      {"reduce_scatter", kind_json(f.reduce_scatter)},
      {"compute_s", f.compute_s},
      {"blocked_on_comm_s", f.blocked_s}};
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(meta)}};
  return doc.dump();
}

Status Timeline::write_chrome_json(const std::string& path) const {
  std::ofstream out(path, std::ios::trunc);
  out << chrome_json() << "\n";
  out.close();
  if (!out) return Status(Code::kSystem, "timeline: cannot write " + path + " (rank " + std::to_string(rank_) + ")");
  return Status();
}

}  // namespace zw::zero
