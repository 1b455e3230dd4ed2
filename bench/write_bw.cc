// zw_write_bw: perftest ib_write_bw's measurement over a zerowire transport (shm or tcp; ZW_TRANSPORT).
//
// Rank 0 posts -n one-sided writes of -s bytes with at most -t in flight; rank 1 counts their notifications
// and answers when the last arrived, so the time covers delivery, not just posting. BW average = bytes / that
// time; BW peak = the best rate over any window of -t consecutive completions; MsgRate = writes / time.
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/p2p_common.h"

namespace zw::bench {
namespace {

struct BwResult {
  double peak = 0, average = 0, msg_rate = 0;  // bytes/s, bytes/s, messages/s
};

Result<BwResult> run_sender(Pair& p, size_t size, int iters, int depth) {
  transport::Endpoint& ep = p.endpoint();
  ZW_TRY(p.wait(transport::MessageKind::kControl));  // the receiver is ready for this size
  using clock = std::chrono::steady_clock;
  std::vector<clock::time_point> window_start;
  double best_window = 1e30;
  auto t0 = clock::now();
  auto last_mark = t0;
  uint64_t base = ep.writes_completed();
  for (int i = 0; i < iters; ++i) {
    while (ep.writes_posted() - ep.writes_completed() >= static_cast<uint64_t>(depth)) ZW_TRY(ep.error());
    ZW_TRY(ep.write(p.local(), 0, p.remote_key(), 0, size, static_cast<uint64_t>(i)));
    uint64_t done = ep.writes_completed() - base;
    if (done > 0 && done % depth == 0) {
      auto now = clock::now();
      best_window = std::min(best_window, std::chrono::duration<double>(now - last_mark).count());
      last_mark = now;
    }
  }
  ZW_TRY(p.wait(transport::MessageKind::kControl));  // every write has landed
  double secs = std::chrono::duration<double>(clock::now() - t0).count();
  BwResult r;
  r.average = static_cast<double>(size) * iters / secs;
  r.peak = best_window < 1e29 ? static_cast<double>(size) * depth / best_window : r.average;
  r.peak = std::max(r.peak, r.average);
  r.msg_rate = iters / secs;
  return r;
}

Status run_receiver(Pair& p, int iters) {
  ZW_TRY(p.signal());
  for (int i = 0; i < iters; ++i) ZW_TRY(p.wait(transport::MessageKind::kNotify));
  return p.signal();
}

}  // namespace
}  // namespace zw::bench

int main(int argc, char** argv) {
  using namespace zw::bench;  // NOLINT(google-build-using-namespace)
  P2pFlags flags;
  int code = 0;
  if (!parse_p2p_flags(argc, argv, "zerowire one-sided write bandwidth (perftest ib_write_bw columns)", 5000, &flags,
                       &code))
    return code;
  std::vector<size_t> sizes = flags.sizes();
  auto pair = Pair::connect(sizes.back());
  if (!pair.ok()) {
    std::fprintf(stderr, "zw_write_bw: %s\n", pair.status().to_string().c_str());
    return 1;
  }
  Pair& p = *pair.value();
  if (p.rank() == 0) {
    print_rule();
    std::printf("                    RDMA_Write BW Test (zerowire %s transport)\n", p.transport().name());
    std::printf(" Number of qps   : 1\t\tTransport type : %s\n TX depth        : %d\n", p.transport().name(),
                flags.tx_depth);
    print_rule();
    std::printf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n",
                flags.report_gbits ? "Gb/sec" : "MB/sec", flags.report_gbits ? "Gb/sec" : "MB/sec");
  }
  for (size_t size : sizes) {
    if (p.rank() == 1) {
      zw::Status s = run_receiver(p, flags.iters);
      if (!s.ok()) {
        std::fprintf(stderr, "zw_write_bw: %s\n", s.to_string().c_str());
        return 1;
      }
      continue;
    }
    auto r = run_sender(p, size, flags.iters, flags.tx_depth);
    if (!r.ok()) {
      std::fprintf(stderr, "zw_write_bw: %s\n", r.status().to_string().c_str());
      return 1;
    }
    double scale = flags.report_gbits ? 8e-9 : 1e-6;  // perftest's MB is 10^6 bytes
    std::printf(" %-10zu %-10d       %-14.2f     %-14.2f       %.6f\n", size, flags.iters, r->peak * scale,
                r->average * scale, r->msg_rate / 1e6);
    std::fflush(stdout);
  }
  if (p.rank() == 0) print_rule();
  return 0;
}
