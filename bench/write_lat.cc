// zw_write_lat: perftest ib_write_lat's measurement over a zerowire transport (shm or tcp; ZW_TRANSPORT).
//
// Ping-pong of one-sided writes with notification: rank 0 writes -s bytes, rank 1 waits for the notify and
// writes back; half of each round trip is one sample. Columns as perftest: t_min, t_max, t_typical (median),
// t_avg, t_stdev, 99% and 99.9% percentiles, in microseconds. --profile adds, per rank, the median time inside
// write() and the median number of poll() calls per wait (where a round trip's time goes).
// Samples are timed with the TSC on x86-64 (like perftest's get_cycles), converted with a rate calibrated against
// the steady clock over the whole run: in a VM without a usable TSC clocksource (the Soft-RoCE guest, on hpet) a
// steady-clock read is a ~0.9 us system call, and the two per round trip added ~0.45 us to every sample.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <vector>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "bench/p2p_common.h"

namespace zw::bench {
namespace {

constexpr int kWarmup = 100;

// --profile: per iteration, the TSC cycles inside write() and the poll() calls of the wait (rdtsc costs ~0.01 us
// even in the Soft-RoCE guest, whose clock_gettime is a ~0.9 us system call; elsewhere the steady clock).
uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

struct Profile {
  std::vector<double> write_cycles, polls;
  uint64_t tsc0 = 0;
  std::chrono::steady_clock::time_point t0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void print_profile(const Profile& prof, int rank, size_t size) {
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - prof.t0).count();
  double per_us = static_cast<double>(ticks() - prof.tsc0) / us;
  std::printf("PROFILE rank %d size %zu: write() median %.2f us, poll() calls per wait median %.0f\n", rank, size,
              median(prof.write_cycles) / per_us, median(prof.polls));
}

Result<std::vector<double>> ping_pong(Pair& p, size_t size, int iters, Profile* prof) {
  using clock = std::chrono::steady_clock;
  std::vector<double> samples;
  samples.reserve(iters);
  transport::Endpoint& ep = p.endpoint();
  const bool initiator = p.rank() == 0;
  auto timed_write = [&](int i) -> Status {
    uint64_t c0 = prof ? ticks() : 0;
    ZW_TRY(ep.write(p.local(), 0, p.remote_key(), 0, size, static_cast<uint64_t>(i + kWarmup)));
    if (prof && i >= 0) prof->write_cycles.push_back(static_cast<double>(ticks() - c0));
    return Status();
  };
  auto timed_wait = [&](int i) -> Status {
    uint64_t polls = 0;
    ZW_TRY(p.wait(transport::MessageKind::kNotify, nullptr, &polls));
    if (prof && i >= 0) prof->polls.push_back(static_cast<double>(polls));
    return Status();
  };
  if (prof) {
    prof->tsc0 = ticks();
    prof->t0 = clock::now();
  }
  std::vector<uint64_t> round_trips;  // ticks()
  round_trips.reserve(static_cast<size_t>(iters));
  const uint64_t ticks_start = ticks();
  const auto clock_start = clock::now();
  for (int i = -kWarmup; i < iters; ++i) {
    const uint64_t t0 = ticks();
    if (initiator) {
      ZW_TRY(timed_write(i));
      ZW_TRY(timed_wait(i));
    } else {
      ZW_TRY(timed_wait(i));
      ZW_TRY(timed_write(i));
    }
    if (i >= 0) round_trips.push_back(ticks() - t0);
  }
  const double run_us = std::chrono::duration<double, std::micro>(clock::now() - clock_start).count();
  const double ticks_per_us = static_cast<double>(ticks() - ticks_start) / run_us;
  for (uint64_t t : round_trips) samples.push_back(static_cast<double>(t) / ticks_per_us / 2);
  // Let the last write complete before the next size reuses the buffers.
  while (ep.writes_completed() < ep.writes_posted()) ZW_TRY(ep.error());
  return samples;
}

double percentile(const std::vector<double>& sorted, double q) {
  size_t idx = static_cast<size_t>(std::ceil(q * sorted.size())) - 1;
  return sorted[std::min(idx, sorted.size() - 1)];
}

void report(size_t size, std::vector<double> s) {
  std::sort(s.begin(), s.end());
  double sum = 0, sq = 0;
  for (double v : s) sum += v;
  double avg = sum / s.size();
  for (double v : s) sq += (v - avg) * (v - avg);
  std::printf(" %-7zu %-10zu   %-7.2f        %-7.2f      %-7.2f     \t   %-7.2f     \t%-7.2f\t\t%-7.2f   \t\t%-7.2f\n", size,
              s.size(), s.front(), s.back(), s[s.size() / 2], avg, std::sqrt(sq / s.size()), percentile(s, 0.99),
              percentile(s, 0.999));
}

}  // namespace
}  // namespace zw::bench

int main(int argc, char** argv) {
  using namespace zw::bench;  // NOLINT(google-build-using-namespace)
  P2pFlags flags;
  int code = 0;
  auto pair = start_p2p(argc, argv, "zw_write_lat", "zerowire one-sided write latency (perftest ib_write_lat columns)",
                        "RDMA_Write Latency Test", 1000, &flags, &code);
  if (!pair) return code;
  Pair& p = *pair;
  if (p.rank() == 0) {
    print_rule();
    std::printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
                "   99%% percentile[usec]   99.9%% percentile[usec] \n");
  }
  code = run_sizes("zw_write_lat", flags.sizes(), [&](size_t size) -> zw::Status {
    Profile prof;
    ZW_ASSIGN_OR_RETURN(std::vector<double> samples, ping_pong(p, size, flags.iters, flags.profile ? &prof : nullptr));
    if (p.rank() == 0) report(size, samples);
    if (flags.profile) print_profile(prof, p.rank(), size);
    return zw::Status();
  });
  if (p.rank() == 0) print_rule();
  return code;
}
