// collectives/monitor/monitor_service.h — the process's monitoring threads. They know every live communicator's
// monitor. The service thread serves the Prometheus text endpoint (ZW_METRICS_PORT; a small HTTP/1.0 server bound to
// ZW_METRICS_ADDR), writes the JSON dump (ZW_METRICS_DUMP) when a communicator ends and on SIGUSR2, and drives the
// straggler exchange of each monitor through the store (every 50 ms). The counting thread counts the finished host
// records into each monitor's aggregates and finishes the device records of communicators with a device path (every
// 5 ms); it never waits on a socket, so that a slow scrape or store cannot leave the writers to count (comm_monitor.h).
//
// The threads start with the first communicator and stop at process exit. Threading: add/retire/render are
// thread-safe (one mutex, never taken on an operation's hot path). Non-goals: HTTP keep-alive, TLS, pushing to a
// gateway, anything but GET.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zerowire/status.h"

namespace zw::internal::monitor {

class CommMonitor;

class MonitorService {
 public:
  static MonitorService& instance();
  ~MonitorService();

  // Serves `m` from now on, starting the service's threads with the first; an error when its serving thread cannot
  // start (m is then not added: its communicator runs unmonitored).
  Status add(const std::shared_ptr<CommMonitor>& m);
  // Writes the dump with `m`'s final state (when ZW_METRICS_DUMP is set), then forgets `m`.
  void retire(const CommMonitor* m);

  // The endpoint's texts, from the live monitors (and, for JSON, the final state of retired ones).
  std::string prometheus();
  std::string json();
  // Writes the JSON dump to the ZW_METRICS_DUMP path now; returns the path ("" when the knob is empty or the write
  // failed, logged).
  std::string write_dump();
  // The port the endpoint listens on (0: none).
  int port() const { return port_.load(); }

 private:
  MonitorService() = default;
  Status start_locked();
  void serve_loop();
  void count_loop();
  // Waits up to timeout_ms for the stop or, with fd >= 0, for fd to be readable (*ready); returns whether to stop.
  bool wait(int timeout_ms, int fd = -1, bool* ready = nullptr);
  void open_endpoint();
  void serve_one(int fd);
  std::vector<std::shared_ptr<CommMonitor>> live();

  std::mutex mutex_;
  std::vector<std::shared_ptr<CommMonitor>> monitors_;
  std::vector<std::string> retired_json_;  // final JSON objects of communicators that ended
  std::thread thread_;                     // service
  std::thread count_thread_;               // counting
  std::atomic<bool> stop_{false};
  int stop_fd_ = -1;  // an eventfd the destructor signals: the threads wait on it
  std::atomic<int> port_{0};
  int listen_fd_ = -1;
};

}  // namespace zw::internal::monitor
