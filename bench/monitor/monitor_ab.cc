// zw_monitor_ab — what monitoring costs the collectives themselves, without the launch-to-launch variance:
// every rank holds two communicators over the same ranks, one with monitoring on and one off (CommConfig::monitor),
// and times the same operation on the same buffers with each, round after round, alternating which goes first. A
// round's overhead is its on/off − 1; printed are the median over the rounds with the quartiles, and the median times,
// then how many operations each side's worker thread ran (hand-offs between threads, summed over the ranks) and the
// overhead of the rounds in which neither side handed any over.
// overhead.py compares separate launches with ZW_MONITOR=1 and =0, whose buffers land differently in memory, which
// moves a 4 KiB operation by several percent either way; here one process and one set of buffers serve both sides.
// --control leaves both communicators unmonitored: the A/A figure, what the pairing itself shows between two
// communicators (ideally 0; its spread is the resolution of the on/off figure). The monitored communicator is created
// first; --off-first creates it second, so that its monitor's allocations no longer sit between the two (where each
// communicator's memory lands is part of what a pairing compares: run both orders).
//   zwrun -n N -- zw_monitor_ab [-c all_gather|all_reduce] [-b BYTES] [-n ITERS] [-r ROUNDS] [-w WARMUP] [--control]
//                               [--off-first]
// BYTES is nccl-tests' size (the all-gather's whole output, the all-reduce's buffer); each timing issues ITERS
// operations back to back and waits for them all, as the nccl-tests-style benchmarks do; rank 0's times are printed.
// The monitored side runs with the environment's monitoring knobs (the straggler window included).
// Non-goals: device memory (zw_nccl_api_overhead -m device with ZW_MONITOR_DEVICE_SAMPLE), checking results (the
// collectives tests do).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "collectives/comm_impl.h"
#include "common/knobs.h"
#include "zerowire/communicator.h"

namespace {

using zw::Communicator;
using zw::Result;
using zw::Work;

struct Flags {
  std::string coll = "all_gather";
  std::string bytes = "4K";
  int iters = 2000;
  int rounds = 41;
  int warmup = 200;
  bool control = false;
  bool off_first = false;
};

Result<Work> issue(Communicator& c, const Flags& f, const zw::CollectiveOptions& o) {
  return f.coll == "all_gather" ? zw::all_gather(c, o) : zw::all_reduce(c, o);
}

// Mean µs per operation over `iters` issued back to back, after a barrier.
Result<double> time_ops(Communicator& c, const Flags& f, const zw::CollectiveOptions& o, int iters) {
  ZW_ASSIGN_OR_RETURN(Work b, zw::barrier(c));
  ZW_TRY(b.wait());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Work> works;
  works.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    ZW_ASSIGN_OR_RETURN(Work w, issue(c, f, o));
    works.push_back(std::move(w));
  }
  for (const Work& w : works) ZW_TRY(w.wait());
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

int fail(const std::string& what, const zw::Status& s) {
  std::fprintf(stderr, "zw_monitor_ab: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}

// The paired rounds' figures. hand_offs[2r] and [2r + 1]: operations that the monitored and the unmonitored
// communicator's worker thread ran in round r rather than the issuing thread while it waited, summed over the ranks.
// Each is a hand-off between threads, microseconds against a 4 KiB operation's 2-3, so a few of them move a round by
// a percent.
struct Rounds {
  std::vector<double> t_on, t_off, overhead;  // µs per operation, and on/off - 1, per round
  std::vector<int64_t> hand_offs;
};

Result<Rounds> run_rounds(Communicator& con, Communicator& coff, const Flags& f, const zw::CollectiveOptions& o) {
  auto by_worker = [](Communicator& c) { return static_cast<int64_t>(c.impl().run_counts().by_worker); };
  Rounds out;
  out.hand_offs.assign(2 * static_cast<size_t>(f.rounds), 0);
  for (int r = 0; r < f.rounds; ++r) {
    double t[2] = {0, 0};  // on, off
    for (int k = 0; k < 2; ++k) {
      const bool monitored = (k == 0) == (r % 2 == 0);  // alternate which side goes first
      Communicator& c = monitored ? con : coff;
      const int64_t before = by_worker(c);
      ZW_ASSIGN_OR_RETURN(t[monitored ? 0 : 1], time_ops(c, f, o, f.iters));
      out.hand_offs[2 * static_cast<size_t>(r) + (monitored ? 0 : 1)] = by_worker(c) - before;
    }
    out.t_on.push_back(t[0]);
    out.t_off.push_back(t[1]);
    out.overhead.push_back(t[0] / t[1] - 1);
  }
  const size_t bytes = out.hand_offs.size() * sizeof(int64_t);
  const zw::MemRef counts = zw::MemRef::host(out.hand_offs.data(), bytes);
  ZW_ASSIGN_OR_RETURN(Work w, zw::all_reduce(coff, zw::CollectiveOptions{counts, counts, out.hand_offs.size(),
                                                                         zw::DataType::kInt64, zw::ReduceOp::kSum}));
  ZW_TRY(w.wait());
  return out;
}

// Rank 0's two lines: the overhead, then the hand-offs and the overhead of the rounds that had none.
void report(const Flags& f, const Communicator& c, const Rounds& r, size_t bytes) {
  std::printf(
      "%s %zu B, %d ranks, %s, %d paired rounds of %d%s%s: off %.3f us, on %.3f us (medians); overhead median "
      "%+.2f %% [quartiles %+.2f, %+.2f]\n",
      f.coll.c_str(), bytes, c.size(), c.transport_name(), f.rounds, f.iters, f.control ? " (control: both off)" : "",
      f.off_first ? " (off created first)" : "", quantile(r.t_off, 0.5), quantile(r.t_on, 0.5),
      100 * quantile(r.overhead, 0.5), 100 * quantile(r.overhead, 0.25), 100 * quantile(r.overhead, 0.75));
  long long total[2] = {0, 0};
  std::vector<double> inline_rounds;  // the overheads of the rounds without a hand-off on either side
  for (size_t i = 0; i < r.overhead.size(); ++i) {
    total[0] += r.hand_offs[2 * i];
    total[1] += r.hand_offs[2 * i + 1];
    if (r.hand_offs[2 * i] == 0 && r.hand_offs[2 * i + 1] == 0) inline_rounds.push_back(r.overhead[i]);
  }
  std::printf("operations run by a worker thread, all ranks: on %lld, off %lld of %d per rank", total[0], total[1],
              f.rounds * f.iters);
  if (inline_rounds.empty())
    std::printf("; every round had some\n");
  else
    std::printf("; overhead median over the %zu rounds with none %+.2f %%\n", inline_rounds.size(),
                100 * quantile(inline_rounds, 0.5));
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"monitoring on against off on two communicators of the same ranks (paired rounds)"};
  app.add_option("-c,--coll", f.coll, "all_gather or all_reduce")->check(CLI::IsMember({"all_gather", "all_reduce"}));
  app.add_option("-b,--bytes", f.bytes, "nccl-tests size (e.g. 4K)");
  app.add_option("-n,--iters", f.iters, "operations per timing")->check(CLI::PositiveNumber);
  app.add_option("-r,--rounds", f.rounds, "paired rounds")->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup", f.warmup, "operations on each communicator before the rounds")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--control", f.control, "both communicators unmonitored (A/A: the pairing's own bias and spread)");
  app.add_flag("--off-first", f.off_first, "create the unmonitored communicator first");
  CLI11_PARSE(app, argc, argv);

  zw::CommConfig on_config, off_config;
  on_config.name = "ab-on";
  on_config.monitor = f.control ? 0 : 1;
  off_config.name = "ab-off";
  off_config.monitor = 0;
  std::unique_ptr<Communicator> on, off;
  for (bool monitored : {!f.off_first, f.off_first}) {
    auto c = Communicator::create_from_environment(monitored ? on_config : off_config);
    if (!c.ok()) return fail(monitored ? "the monitored communicator" : "the unmonitored communicator", c.status());
    (monitored ? on : off) = std::move(c.value());
  }
  Communicator& con = *on;
  Communicator& coff = *off;
  const int n = con.size();

  int64_t parsed = 0;
  if (!zw::parse_bytes(f.bytes, &parsed) || parsed <= 0)
    return fail("size", zw::Status(zw::Code::kInvalidArgument, "-b " + f.bytes + " is not a size (e.g. 4K, 1M)"));
  const size_t bytes = static_cast<size_t>(parsed);
  const size_t count = f.coll == "all_gather" ? bytes / 4 / static_cast<size_t>(n) : bytes / 4;
  if (count == 0) return fail("size", zw::Status(zw::Code::kInvalidArgument, "-b " + f.bytes + " is too small"));
  const size_t in_bytes = count * 4, out_bytes = f.coll == "all_gather" ? in_bytes * static_cast<size_t>(n) : in_bytes;
  std::vector<float> in(in_bytes / 4, 1.0f), out(out_bytes / 4, 0.0f);
  zw::CollectiveOptions o{zw::MemRef::host(in.data(), in_bytes), zw::MemRef::host(out.data(), out_bytes), count,
                          zw::DataType::kFloat32, zw::ReduceOp::kSum};

  for (Communicator* c : {&con, &coff})
    if (auto w = time_ops(*c, f, o, std::max(f.warmup, 1)); !w.ok()) return fail("warm-up", w.status());
  auto rounds = run_rounds(con, coff, f, o);
  if (!rounds.ok()) return fail("the paired rounds", rounds.status());
  if (con.rank() == 0) report(f, con, rounds.value(), f.coll == "all_gather" ? out_bytes : in_bytes);
  return 0;
}
