// zw_write_lat: perftest ib_write_lat's measurement over a zerowire transport (shm or tcp; ZW_TRANSPORT).
//
// Ping-pong of one-sided writes with notification: rank 0 writes -s bytes, rank 1 waits for the notify and
// writes back; half of each round trip is one sample. Columns as perftest: t_min, t_max, t_typical (median),
// t_avg, t_stdev, 99% and 99.9% percentiles, in microseconds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/p2p_common.h"

namespace zw::bench {
namespace {

constexpr int kWarmup = 100;

Result<std::vector<double>> ping_pong(Pair& p, size_t size, int iters) {
  using clock = std::chrono::steady_clock;
  std::vector<double> samples;
  samples.reserve(iters);
  transport::Endpoint& ep = p.endpoint();
  const bool initiator = p.rank() == 0;
  for (int i = -kWarmup; i < iters; ++i) {
    auto t0 = clock::now();
    if (initiator) {
      ZW_TRY(ep.write(p.local(), 0, p.remote_key(), 0, size, static_cast<uint64_t>(i + kWarmup)));
      ZW_TRY(p.wait(transport::MessageKind::kNotify));
    } else {
      ZW_TRY(p.wait(transport::MessageKind::kNotify));
      ZW_TRY(ep.write(p.local(), 0, p.remote_key(), 0, size, static_cast<uint64_t>(i + kWarmup)));
    }
    double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / 2;
    if (i >= 0) samples.push_back(us);
  }
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
    ZW_ASSIGN_OR_RETURN(std::vector<double> samples, ping_pong(p, size, flags.iters));
    if (p.rank() == 0) report(size, samples);
    return zw::Status();
  });
  if (p.rank() == 0) print_rule();
  return code;
}
