// zw_write_bw: perftest ib_write_bw's measurement over a zerowire transport (shm or tcp; ZW_TRANSPORT).
//
// Rank 0 posts -n one-sided writes of -s bytes with at most -t in flight, in five equal segments; rank 1
// counts their notifications and acknowledges each segment once its last write arrived, so every time covers
// delivery, not just posting (a local completion on tcp only means "handed to the kernel"). BW average =
// all bytes / all time; BW peak = the best segment; MsgRate = writes / time.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "bench/p2p_common.h"

namespace zw::bench {
namespace {

constexpr int kSegments = 5;

// Writes of segment `s` out of `iters`.
int segment_size(int iters, int s) { return iters / kSegments + (s < iters % kSegments ? 1 : 0); }

struct BwResult {
  double peak = 0, average = 0, msg_rate = 0;  // bytes/s, bytes/s, messages/s
};

Result<BwResult> run_sender(Pair& p, size_t size, int iters, int depth) {
  transport::Endpoint& ep = p.endpoint();
  ZW_TRY(p.wait(transport::MessageKind::kControl));  // the receiver is ready for this size
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  BwResult r;
  for (int s = 0, posted = 0; s < kSegments; ++s) {
    const auto seg_start = clock::now();
    const int n = segment_size(iters, s);
    for (int i = 0; i < n; ++i, ++posted) {
      while (ep.writes_posted() - ep.writes_completed() >= static_cast<uint64_t>(depth)) ZW_TRY(ep.error());
      ZW_TRY(ep.write(p.local(), 0, p.remote_key(), 0, size, static_cast<uint64_t>(posted)));
    }
    ZW_TRY(p.wait(transport::MessageKind::kControl));  // the segment's writes have all landed
    double secs = std::chrono::duration<double>(clock::now() - seg_start).count();
    if (n > 0) r.peak = std::max(r.peak, static_cast<double>(size) * n / secs);
  }
  double secs = std::chrono::duration<double>(clock::now() - t0).count();
  r.average = static_cast<double>(size) * iters / secs;
  r.msg_rate = iters / secs;
  return r;
}

Status run_receiver(Pair& p, int iters) {
  ZW_TRY(p.signal());
  for (int s = 0; s < kSegments; ++s) {
    for (int i = segment_size(iters, s); i > 0; --i) ZW_TRY(p.wait(transport::MessageKind::kNotify));
    ZW_TRY(p.signal());
  }
  return Status();
}

}  // namespace
}  // namespace zw::bench

int main(int argc, char** argv) {
  using namespace zw::bench;  // NOLINT(google-build-using-namespace)
  P2pFlags flags;
  int code = 0;
  auto pair = start_p2p(argc, argv, "zw_write_bw", "zerowire one-sided write bandwidth (perftest ib_write_bw columns)",
                        "RDMA_Write BW Test", 5000, &flags, &code);
  if (!pair) return code;
  Pair& p = *pair;
  const char* unit = flags.report_gbits ? "Gb/sec" : "MB/sec";
  if (p.rank() == 0) {
    std::printf(" Number of qps   : 1\t\tTransport type : %s\n TX depth        : %d\n", p.transport().name(),
                flags.tx_depth);
    print_rule();
    std::printf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n", unit, unit);
  }
  code = run_sizes("zw_write_bw", flags.sizes(), [&](size_t size) -> zw::Status {
    if (p.rank() == 1) return run_receiver(p, flags.iters);
    ZW_ASSIGN_OR_RETURN(BwResult r, run_sender(p, size, flags.iters, flags.tx_depth));
    double scale = flags.report_gbits ? 8e-9 : 1e-6;  // perftest's MB is 10^6 bytes
    std::printf(" %-10zu %-10d       %-14.2f     %-14.2f       %.6f\n", size, flags.iters, r.peak * scale,
                r.average * scale, r.msg_rate / 1e6);
    return zw::Status();
  });
  if (p.rank() == 0) print_rule();
  return code;
}
