// A rank process for the monitoring tests: joins the communicator described by the environment (as zwrun sets it)
// and runs collectives, with faults to inject.
//   zw_monitor_probe [--ops N] [--op all_gather|all_reduce] [--bytes B] [--delay-rank R --delay-ms MS]
//                    [--seconds S] [--hold-file PATH] [--die-rank R --die-at I --die stop|kill]
// --delay-rank sleeps MS before each operation on rank R (a straggler); --hold-file keeps the communicator alive
// after the operations until PATH exists (so a test can scrape the endpoint); --die-rank raises SIGSTOP or SIGKILL
// on rank R before operation I, 300 ms after finishing the one before (the flight-recorder tests). --seconds runs
// operations until rank 0 has run them for S seconds instead of N of them (every 64 operations a one-float all-reduce
// tells the ranks whether to stop; those are collectives too). Exit codes: 0 done, 3 an operation failed (its error
// on stderr), 5 set-up failed or bad arguments. After its operations it sets the gauge
// zerowire_probe_operations_done{rank} to the number run (zerowire/metrics.h).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "zerowire/communicator.h"
#include "zerowire/metrics.h"

namespace {

struct Args {
  int ops = 100;
  double seconds = 0;  // > 0: run until rank 0 has run for this long (instead of `ops`)
  std::string op = "all_gather";
  size_t bytes = 4096;  // per rank
  int delay_rank = -1, delay_ms = 0;
  std::string hold_file;
  int die_rank = -1, die_at = 0;
  int die_signal = SIGKILL;
};

bool parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) return false;
    std::string v = argv[++i];
    if (k == "--ops")
      a->ops = std::atoi(v.c_str());
    else if (k == "--op")
      a->op = v;
    else if (k == "--seconds")
      a->seconds = std::atof(v.c_str());
    else if (k == "--bytes")
      a->bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--delay-rank")
      a->delay_rank = std::atoi(v.c_str());
    else if (k == "--delay-ms")
      a->delay_ms = std::atoi(v.c_str());
    else if (k == "--hold-file")
      a->hold_file = v;
    else if (k == "--die-rank")
      a->die_rank = std::atoi(v.c_str());
    else if (k == "--die-at")
      a->die_at = std::atoi(v.c_str());
    else if (k == "--die")
      a->die_signal = v == "stop" ? SIGSTOP : SIGKILL;
    else
      return false;
  }
  return a->op == "all_gather" || a->op == "all_reduce";
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, &a)) {
    std::fprintf(stderr, "usage: see the header of monitor_probe_main.cc\n");
    return 5;
  }
  auto comm = zw::Communicator::create_from_environment();
  if (!comm.ok()) {
    std::fprintf(stderr, "setup failed: %s\n", comm.status().to_string().c_str());
    return 5;
  }
  zw::Communicator& c = *comm.value();
  const size_t count = std::max<size_t>(a.bytes / 4, 1);
  std::vector<float> in(count, 1.0f), out(count * static_cast<size_t>(c.size()));
  const auto t0 = std::chrono::steady_clock::now();
  int done = 0;
  for (int i = 0; a.seconds > 0 || i < a.ops; ++i, ++done) {
    if (a.seconds > 0 && i % 64 == 0) {  // rank 0 says whether its time is up
      const bool up =
          c.rank() == 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= a.seconds;
      float flag = up ? 1.0f : 0.0f, sum = 0.0f;
      auto w = zw::all_reduce(c, {zw::MemRef::host(&flag, 4), zw::MemRef::host(&sum, 4), 1, zw::DataType::kFloat32});
      zw::Status s = w.ok() ? w->wait() : w.status();
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d stop vote before operation %d: %s\n", c.rank(), i, s.to_string().c_str());
        return 3;
      }
      if (sum > 0) break;
    }
    if (c.rank() == a.die_rank && i == a.die_at) {
      // The others get time to start operation I (so that they are blocked in it, not killed by zwrun before it).
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::raise(a.die_signal);
    }
    if (c.rank() == a.delay_rank) std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
    const zw::MemRef src = zw::MemRef::host(in.data(), count * 4);
    auto w = a.op == "all_gather"
                 ? zw::all_gather(c, {src, zw::MemRef::host(out.data(), out.size() * 4), count, zw::DataType::kFloat32})
                 : zw::all_reduce(c, {src, zw::MemRef::host(out.data(), count * 4), count, zw::DataType::kFloat32});
    zw::Status s = w.ok() ? w->wait() : w.status();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d operation %d: %s\n", c.rank(), i, s.to_string().c_str());
      return 3;
    }
  }
  // A gauge published through zerowire/metrics.h, as the ZeRO-3 engine and zw_train do (the endpoint test reads it).
  zw::metrics::set_gauge("zerowire_probe_operations_done", "operations this probe finished",
                         {{"rank", std::to_string(c.rank())}}, double(done));
  if (!a.hold_file.empty()) {
    std::printf("holding until %s exists\n", a.hold_file.c_str());
    std::fflush(stdout);
    while (access(a.hold_file.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}
