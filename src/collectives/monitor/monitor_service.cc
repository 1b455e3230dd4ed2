// The monitoring thread: registry, HTTP endpoint, JSON dump, SIGUSR2, straggler ticks.
#include "collectives/monitor/monitor_service.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "collectives/monitor/comm_monitor.h"
#include "collectives/monitor/exporter.h"
#include "collectives/monitor/gauges.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/socket.h"
#include "common/thread.h"

namespace zw::internal::monitor {
namespace {

constexpr int kTickMs = 50;  // the period of the straggler exchange, and the longest a dump request (SIGUSR2) waits
// The counting thread's period: the host records finished are counted into the aggregates, and the device records of
// communicators with a device path are finished, this often. An issuing thread can fill the 8,192 record slots in
// ~40 ms of small device operations (~5 µs each), and an operation that finds every slot taken is left out; a host
// writer that finds half of them not yet counted (~9 ms of 2 µs operations) counts them itself. (A wake-up every
// 5 ms of an otherwise sleeping thread: ~200 short passes per second.)
constexpr int kCountMs = 5;
constexpr auto kRequestTimeout = std::chrono::seconds(2);
std::atomic<bool> g_dump_requested{false};

void on_sigusr2(int) { g_dump_requested.store(true, std::memory_order_relaxed); }

// This process's rank among the processes of its host, from the launcher's variables (0 when none says).
int local_rank() {
  if (knobs().local_rank >= 0) return static_cast<int>(knobs().local_rank);
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

std::string http_response(int code, const char* reason, const char* type, const std::string& body) {
  return "HTTP/1.0 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

MonitorService& MonitorService::instance() {
  static MonitorService service;
  return service;
}

MonitorService::~MonitorService() {
  stop_.store(true);
  if (stop_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
  if (count_thread_.joinable()) count_thread_.join();
  if (stop_fd_ >= 0) close(stop_fd_);
  // At process exit: communicators never destroyed (a leaked handle, exit() from the trainer) still get their dump.
  bool live_left = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_left = !monitors_.empty();
  }
  if (live_left) write_dump();
  if (listen_fd_ >= 0) close(listen_fd_);
}

Status MonitorService::add(const std::shared_ptr<CommMonitor>& m) {
  std::lock_guard<std::mutex> lock(mutex_);
  ZW_TRY(start_locked());
  monitors_.push_back(m);
  return Status();
}

Status MonitorService::start_locked() {
  if (thread_.joinable()) return Status();
  open_endpoint();
  if (!knobs().metrics_dump.empty()) {
    struct sigaction old {};
    if (sigaction(SIGUSR2, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
      struct sigaction sa {};
      sa.sa_handler = on_sigusr2;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      sigaction(SIGUSR2, &sa, nullptr);
    }
  }
  if (stop_fd_ < 0) stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);  // -1: the threads look at stop_ every wait
  ZW_ASSIGN_OR_RETURN(thread_, start_thread("the monitor's serving thread", [this] { serve_loop(); }));
  // Without the counting thread the records are still counted, by the threads that write them (CommMonitor::
  // help_aggregate, when the ring is half full): slower, not wrong.
  Result<std::thread> count = start_thread("the monitor's counting thread", [this] { count_loop(); });
  if (count.ok()) {
    count_thread_ = std::move(count).value();
  } else {
    ZW_WARN(kColl, "%s; the threads that issue operations count their records instead",
            count.status().message().c_str());
  }
  return Status();
}

void MonitorService::open_endpoint() {
  const Knobs& k = knobs();
  if (k.metrics_port <= 0 || listen_fd_ >= 0) return;  // off, or open from an earlier start whose thread failed
  const int64_t port = k.metrics_port + local_rank();
  if (port > 65535) {  // a uint16_t would wrap it onto another port (70000: 4464; 65536: any free one) unsaid
    ZW_WARN(kColl,
            "metrics endpoint not started: ZW_METRICS_PORT=%lld + local rank %d = %lld is past the last TCP port "
            "(65535); choose a base port of at most %d",
            static_cast<long long>(k.metrics_port), local_rank(), static_cast<long long>(port), 65535 - local_rank());
    return;
  }
  uint16_t bound = 0;
  auto fd = net::listen_tcp(net::HostPort{k.metrics_addr, static_cast<uint16_t>(port)}, 16, &bound);
  if (!fd.ok()) {
    ZW_WARN(kColl, "metrics endpoint not started: %s (ZW_METRICS_PORT=%lld + local rank %d; choose a free port)",
            fd.status().to_string().c_str(), static_cast<long long>(k.metrics_port), local_rank());
    return;
  }
  listen_fd_ = fd.value().release();
  port_.store(bound);
  ZW_INFO(kColl, "metrics endpoint: http://%s:%d/metrics", k.metrics_addr.c_str(), bound);
}

std::vector<std::shared_ptr<CommMonitor>> MonitorService::live() {
  std::lock_guard<std::mutex> lock(mutex_);
  return monitors_;
}

void MonitorService::retire(const CommMonitor* m) {
  std::shared_ptr<CommMonitor> keep;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = monitors_.begin(); it != monitors_.end(); ++it) {
      if (it->get() != m) continue;
      keep = *it;
      monitors_.erase(it);
      break;
    }
    if (keep && !knobs().metrics_dump.empty()) retired_json_.push_back(render_comm_json(*keep));
  }
  if (keep) write_dump();
}

std::string MonitorService::prometheus() { return render_prometheus(live()) + render_gauges_prometheus(); }

std::string MonitorService::json() {
  std::vector<std::string> parts;
  for (const auto& m : live()) parts.push_back(render_comm_json(*m));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    parts.insert(parts.begin(), retired_json_.begin(), retired_json_.end());
  }
  return render_process_json(parts, render_gauges_json());
}

std::string MonitorService::write_dump() {
  const std::string& pattern = knobs().metrics_dump;
  if (pattern.empty()) return "";
  int rank = 0;
  if (auto ms = live(); !ms.empty())
    rank = ms.front()->setup().rank;
  else
    rank = static_cast<int>(std::max<int64_t>(knobs().rank, 0));
  const std::string path = expand_path_pattern(pattern, rank), tmp = path + ".tmp";
  const std::string body = json();
  FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f && std::fwrite(body.data(), 1, body.size(), f) == body.size();
  if (f) ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ZW_WARN(kColl, "metrics dump to %s failed: %s (check ZW_METRICS_DUMP)", path.c_str(), std::strerror(errno));
    return "";
  }
  return path;
}

void MonitorService::serve_one(int fd) {
  net::Fd conn(fd);
  std::string request;
  char buf[2048];
  const Deadline deadline = Deadline::after(kRequestTimeout);
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos &&
         request.size() < 16384 && !deadline.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, deadline.remaining_ms()) <= 0) break;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  std::string path;
  if (request.rfind("GET ", 0) == 0) path = request.substr(4, request.find(' ', 4) - 4);
  std::string reply;
  if (path == "/metrics")
    reply = http_response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", prometheus());
  else if (path == "/metrics.json")
    reply = http_response(200, "OK", "application/json", json());
  else if (path.empty())
    reply = http_response(400, "Bad Request", "text/plain", "only GET is served\n");
  else
    reply = http_response(404, "Not Found", "text/plain", "try /metrics or /metrics.json\n");
  (void)net::send_all(fd, reply.data(), reply.size(), Deadline::after(kRequestTimeout), "metrics client");
}

bool MonitorService::wait(int timeout_ms, int fd, bool* ready) {
  pollfd p[2] = {{stop_fd_, POLLIN, 0}, {fd, POLLIN, 0}};
  const int n = poll(p, fd >= 0 ? 2 : 1, stop_fd_ >= 0 ? timeout_ms : std::min(timeout_ms, kCountMs));
  if (ready) *ready = n > 0 && (p[1].revents & POLLIN) != 0;
  return stop_.load();
}

// Counting only: it never waits on a socket or the store, so that a slow scrape or store does not leave the writers
// to count their records on their operations' path.
namespace {

// Runs one pass of a monitor thread; a pass that runs out of host memory (live()'s copy, a scrape's text) is skipped,
// not fatal: the thread tries again at its next wake-up. Said once per thread.
template <typename F>
void survive_pass(const char* thread, bool* warned, F&& body) {
  try {
    body();
  } catch (const std::bad_alloc&) {
    if (!*warned)
      ZW_WARN(kColl, "the monitor's %s thread ran out of host memory: pass skipped, later ones retried", thread);
    *warned = true;
  }
}

}  // namespace

void MonitorService::count_loop() {
  log::set_thread_rank(-1);
  bool warned = false;
  while (!wait(kCountMs))
    survive_pass("counting", &warned, [this] {
      for (const auto& m : live()) m->catch_up();
    });
}

// Wakes for a scrape, a tick, or its stop.
void MonitorService::serve_loop() {
  log::set_thread_rank(-1);
  auto next_tick = std::chrono::steady_clock::now();
  bool warned = false;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_tick) {
      next_tick = now + std::chrono::milliseconds(kTickMs);
      survive_pass("serving", &warned, [this] {
        for (const auto& m : live()) m->service_tick();
        if (g_dump_requested.exchange(false)) {
          std::string path = write_dump();
          if (!path.empty()) ZW_WARN(kColl, "metrics dumped to %s (SIGUSR2)", path.c_str());
        }
      });
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - std::chrono::steady_clock::now());
    bool scrape = false;
    if (wait(static_cast<int>(std::max<int64_t>(left.count(), 1)), listen_fd_, &scrape)) return;
    if (scrape) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) survive_pass("serving", &warned, [this, fd] { serve_one(fd); });
    }
  }
}

}  // namespace zw::internal::monitor
