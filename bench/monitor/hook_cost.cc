// zw_monitor_hook_bench — what the always-on records cost an operation: the communicator's hooks (on_enqueue,
// on_start, on_finish: a record written in the ring, the aggregates and the straggler window updated) timed in a
// loop on one thread, without any communication, so that the figure does not drown in the machine's noise as the
// collectives benchmarks' on/off comparison does.
//   zw_monitor_hook_bench [ITERATIONS]
// Prints the best of 5 runs in CPU ns per operation. Non-goals: contention (one writer by design; readers copy).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "collectives/monitor/comm_monitor.h"
#include "common/clock.h"

// CPU time of this thread: on a shared machine the wall clock also counts the time other processes ran.
static double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

int main(int argc, char** argv) {
  using namespace zw::internal;
  const long iters = argc > 1 ? std::atol(argv[1]) : 2000000;
  monitor::MonitorSetup setup;
  setup.size = 2;
  setup.comm = "bench";
  setup.transport = "shm";
  setup.hosts = {"h", "h"};
  setup.pids = {1, 2};  // no store: the straggler window is off, as for a world of one
  auto m = monitor::CommMonitor::create(setup);
  if (!m) {
    std::fprintf(stderr, "monitoring is off (ZW_MONITOR=0?)\n");
    return 1;
  }
  const OpDesc desc{OpKind::kAllGather, Algo::kRing, zw::DataType::kFloat32, zw::ReduceOp::kSum, 0, 1024};
  double best = 1e30;
  uint64_t seq = 0;
  for (int run = 0; run < 5; ++run) {
    const double t0 = thread_cpu_ns();
    for (long i = 0; i < iters; ++i) {
      ++seq;
      m->on_enqueue(seq);
      m->on_start(desc, seq, static_cast<int64_t>(seq), static_cast<int64_t>(2 * seq));
      m->on_finish(zw::Status(), static_cast<int64_t>(2 * seq + 1000));
    }
    const double ns = thread_cpu_ns() - t0;
    best = std::min(best, ns / static_cast<double>(iters));
  }
  std::printf(
      "monitoring hooks: %.1f ns (thread CPU time) per operation (best of 5 x %ld; the times are passed in: the "
      "communicator reads "
      "the clock for its Work handles anyway)\n",
      best, iters);
  m->retire();
  return 0;
}
