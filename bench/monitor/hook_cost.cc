// zw_monitor_hook_bench — what the always-on records cost an operation: the communicator's hooks (on_enqueue,
// on_start, on_finish: a record written in the ring) timed in a loop on one thread, without any communication, so
// that the figure does not drown in the machine's noise as the collectives benchmarks' on/off comparison does; and,
// apart, what counting a finished record into the aggregates and the straggler capture costs the counting thread.
//   zw_monitor_hook_bench [ITERATIONS] [RUNS] [cold-l2|cold-all]
// Prints CPU ns per operation over RUNS runs (default 21) of ITERATIONS (default 1M): the minimum, the median and the
// quartiles, so that a figure taken on a loaded machine shows its spread. A loop of hooks finds every line it touches
// in the L1 cache; between two operations of a communicator the rank waits for its peers (often asleep in a futex)
// and runs other code, so in a job the hooks start with colder lines. cold-l2 reads 4 MiB before each operation
// (what the hooks touch leaves L1 and L2, not L3), cold-all 96 MiB (it leaves every cache): each operation is then
// timed alone with the monotonic clock, less the median of an empty timed region after the same eviction, and the
// median over ITERATIONS (default 2,000) operations is printed per run. The hooks are timed in batches of a quarter
// ring with the counting between them, untimed, as the counting thread does it every 5 ms while operations take
// microseconds (a loop of bare hooks would otherwise outrun it and count on the writer's path,
// comm_monitor.h). The straggler window is on (an in-memory store, window ZW_STRAGGLER_WINDOW), as in a communicator
// of two ranks. Non-goals: contention (one writer by design; readers copy).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "collectives/monitor/comm_monitor.h"
#include "common/clock.h"
#include "zerowire/store.h"

// CPU time of this thread: on a shared machine the wall clock also counts the time other processes ran.
static double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Reads `bytes` of a buffer of its own (a line each), so that what the hooks touch leaves the caches that small.
static void evict(size_t bytes) {
  static std::vector<unsigned char> buf;
  if (buf.size() < bytes) buf.assign(bytes, 1);
  volatile unsigned sum = 0;
  unsigned acc = 0;
  for (size_t i = 0; i < bytes; i += 64) acc += buf[i];
  sum = acc;
  (void)sum;
}

int main(int argc, char** argv) {
  using namespace zw::internal;
  const char* mode = argc > 3 ? argv[3] : "";
  const size_t cold_bytes = std::strcmp(mode, "cold-l2") == 0 ? size_t{4} << 20
                            : std::strcmp(mode, "cold-all") == 0 ? size_t{96} << 20
                                                                 : 0;
  if (*mode && cold_bytes == 0) {
    std::fprintf(stderr, "usage: zw_monitor_hook_bench [ITERATIONS] [RUNS] [cold-l2|cold-all]\n");
    return 2;
  }
  const long iters = argc > 1 ? std::atol(argv[1]) : cold_bytes ? 2000 : 1000000;
  const int runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 21;
  monitor::MonitorSetup setup;
  setup.size = 2;
  setup.comm = "bench";
  setup.transport = "shm";
  setup.hosts = {"h", "h"};
  setup.pids = {1, 2};
  setup.store = zw::make_memory_store();  // the straggler window is filled as in a real communicator
  auto m = monitor::CommMonitor::create(setup);
  if (!m) {
    std::fprintf(stderr, "the operation records could not be allocated (see the warning above)\n");
    return 1;
  }
  const OpDesc desc{OpKind::kAllGather, Algo::kRing, zw::DataType::kFloat32, zw::ReduceOp::kSum, 0, 1024};
  const long batch = static_cast<long>(std::max<size_t>(m->ring().capacity() / 4, 1));
  std::vector<double> per_op, per_count;
  uint64_t seq = 0;
  if (cold_bytes) {
    std::vector<double> hooks(static_cast<size_t>(iters)), empty(static_cast<size_t>(iters)), medians;
    for (int run = 0; run < runs; ++run) {
      for (long i = 0; i < iters; ++i) {
        evict(cold_bytes);
        uint64_t t0 = zw::now_ns();
        empty[static_cast<size_t>(i)] = static_cast<double>(zw::now_ns() - t0);
        evict(cold_bytes);
        ++seq;
        t0 = zw::now_ns();
        m->on_enqueue(seq);
        m->on_start(desc, seq, static_cast<int64_t>(seq), static_cast<int64_t>(2 * seq));
        m->on_finish(zw::Status(), static_cast<int64_t>(2 * seq + 1000 + (seq & 1023) * 37));
        hooks[static_cast<size_t>(i)] = static_cast<double>(zw::now_ns() - t0);
        if (i % batch == batch - 1) m->aggregate();
      }
      m->aggregate();
      medians.push_back(median(hooks) - median(empty));
    }
    std::sort(medians.begin(), medians.end());
    std::printf("monitoring hooks after reading %zu MiB (%s): %.1f ns median of the runs' medians (min %.1f, max %.1f), "
                "%d runs x %ld operations, each timed alone less an empty timed region\n",
                cold_bytes >> 20, mode, medians[medians.size() / 2], medians.front(), medians.back(), runs, iters);
    m->retire();
    return 0;
  }
  for (int run = 0; run < runs; ++run) {
    double hooks = 0, counting = 0;
    for (long done = 0; done < iters;) {
      const long n = std::min(batch, iters - done);
      const double t0 = thread_cpu_ns();
      for (long i = 0; i < n; ++i) {
        ++seq;
        m->on_enqueue(seq);
        m->on_start(desc, seq, static_cast<int64_t>(seq), static_cast<int64_t>(2 * seq));
        m->on_finish(zw::Status(), static_cast<int64_t>(2 * seq + 1000 + (seq & 1023) * 37));  // varied durations
      }
      const double t1 = thread_cpu_ns();
      m->aggregate();  // the counting thread's work
      counting += thread_cpu_ns() - t1;
      hooks += t1 - t0;
      done += n;
    }
    per_op.push_back(hooks / static_cast<double>(iters));
    per_count.push_back(counting / static_cast<double>(iters));
  }
  if (m->records_lost() != 0) {
    std::fprintf(stderr, "%llu records were lost before they were counted\n",
                 static_cast<unsigned long long>(m->records_lost()));
    return 1;
  }
  auto report = [&](std::vector<double>& v, const char* what) {
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
    std::printf("%s: %.1f ns median (min %.1f, quartiles %.1f-%.1f) of thread CPU time per operation, %d runs x %ld\n",
                what, at(0.5), v.front(), at(0.25), at(0.75), runs, iters);
  };
  report(per_op, "monitoring hooks (the operation's path; the times are passed in: the communicator reads the clock "
                 "for its Work handles anyway)");
  report(per_count, "counting into the aggregates (the counting thread)");
  m->retire();
  return 0;
}
