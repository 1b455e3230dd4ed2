// One communicator's monitoring: hooks on the hot path, the counting, and the device path's records.
#include "collectives/monitor/comm_monitor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "collectives/monitor/exporter.h"
#include "collectives/monitor/monitor_service.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"

namespace zw::internal::monitor {
namespace {

constexpr size_t kMaxWindow = 1 << 16;

// "/dir/zw-flight-host-pid-comm-rR.bin" ("-rR-dev.bin" for the device path), with characters a file name should not
// hold replaced.
std::string flight_file(const MonitorSetup& s, const char* suffix = "") {
  std::string name = "zw-flight-" + s.hosts[static_cast<size_t>(s.rank)] + "-" + std::to_string(getpid()) + "-" +
                     s.comm + (s.generation ? "." + std::to_string(s.generation) : "") + "-r" + std::to_string(s.rank) +
                     suffix + ".bin";
  for (char& c : name)
    if (c == '/' || c == ' ' || c < 32) c = '_';
  return knobs().flight_dir + "/" + name;
}

}  // namespace

std::shared_ptr<CommMonitor> CommMonitor::create(MonitorSetup setup) {
  const Knobs& k = knobs();
  std::shared_ptr<CommMonitor> m(new CommMonitor(std::move(setup)));
  const MonitorSetup& s = m->setup_;
  RingIdentity who{s.rank, s.size, s.generation, s.hosts[static_cast<size_t>(s.rank)], s.comm, s.transport};
  const std::string file = k.flight_dir.empty() ? std::string() : flight_file(s);
  auto ring = RecordRing::create(static_cast<size_t>(std::max<int64_t>(k.monitor_records, kMinRecords)), who, file);
  if (!ring.ok()) {
    ZW_WARN(kColl, "monitoring is off for communicator '%s': %s", s.comm.c_str(), ring.status().to_string().c_str());
    return nullptr;
  }
  m->ring_ = std::move(ring.value());
  m->enqueued_ = m->ring_->enqueued_word();
  Hot& h = m->hot_;
  h.ring = m->ring_->writer();
  h.next = 0;  // a new ring
  h.help_at = static_cast<uint32_t>(std::min<uint64_t>(m->ring_->capacity() / 2, uint64_t{1} << 31));
  if (!file.empty()) ZW_INFO(kColl, "flight recorder of communicator '%s': %s", s.comm.c_str(), file.c_str());
  if (k.straggler_window > 0 && s.size > 1 && s.store)
    m->straggler_ = std::make_unique<StragglerExchange>(StragglerPeers{s.rank, s.size, s.hosts, s.pids, m->label()},
                                                        std::min(static_cast<size_t>(k.straggler_window), kMaxWindow),
                                                        s.store, m->count_mutex_);
  if (const Status added = MonitorService::instance().add(m); !added.ok()) {
    ZW_WARN(kColl, "monitoring is off for communicator '%s': %s", s.comm.c_str(), added.to_string().c_str());
    return nullptr;
  }
  m->publish_endpoint();
  return m;
}

// Tells tools that find the job through its store (zwtop --store) where this rank's metrics endpoint listens.
void CommMonitor::publish_endpoint() {
  const int port = MonitorService::instance().port();
  if (port <= 0 || !setup_.store) return;
  const std::string value = "{\"rank\":" + std::to_string(setup_.rank) + ",\"size\":" + std::to_string(setup_.size) +
                            ",\"comm\":\"" + escape_text(label()) + "\",\"host\":\"" +
                            escape_text(setup_.hosts[static_cast<size_t>(setup_.rank)]) + "\",\"addr\":\"" +
                            escape_text(knobs().metrics_addr) + "\",\"port\":" + std::to_string(port) +
                            ",\"pid\":" + std::to_string(getpid()) + "}";
  Status s = setup_.store->set(endpoint_key(setup_.rank), value);
  if (!s.ok()) ZW_INFO(kColl, "metrics endpoint not published in the store: %s", s.to_string().c_str());
}

std::string CommMonitor::endpoint_key(int rank) { return "monitor/endpoint/" + std::to_string(rank); }

CommMonitor::~CommMonitor() = default;

// The first failed operation marks the ring as belonging to a failed communicator (writer; off the hot path).
__attribute__((noinline, cold)) void CommMonitor::note_failed(const Status& status) {
  ring_->mark_failed(status.message());
  failed_ = true;
}

// The counting is behind by half the ring (the counting thread held off, or slower than a writer of sub-100 ns
// operations): count now, after the counting in progress if any. Records are then never overwritten uncounted: a
// counting in progress ends within one ring's records, and this writer writes none meanwhile.
__attribute__((noinline, cold)) void CommMonitor::help_aggregate() {
  writer_counts_.fetch_add(1, std::memory_order_relaxed);
  aggregate();
}

void CommMonitor::aggregate() const {
  std::lock_guard<std::mutex> lock(count_mutex_);
  aggregate_locked();
}

void CommMonitor::aggregate_locked() const {
  const uint64_t written = ring_->begun();
  const uint64_t capacity = ring_->capacity();
  uint64_t i = counted_.load(std::memory_order_relaxed);
  if (written - i > capacity) {  // overwritten before they were counted
    lost_.fetch_add(written - capacity - i, std::memory_order_relaxed);
    i = written - capacity;
    last_end_ns_ = 0;
  }
  for (; i < written; ++i) {
    OpFields f;
    const RecordRing::Read r = ring_->read_finished(i, &f);
    if (r == RecordRing::Read::kUnfinished) break;  // the running operation (records finish in order)
    if (r == RecordRing::Read::kGone) {
      lost_.fetch_add(1, std::memory_order_relaxed);
      last_end_ns_ = 0;
    } else {
      count(f);
    }
  }
  counted_.store(i, std::memory_order_release);
}

// One finished record into the aggregates and, for a collective, the straggler capture. Its service time is its
// response time less its wait in the queue: from its issue, or from the end of the operation ahead of it if that ended
// later, to its end. So the hand-off to the next operation and the claim of one issued to an idle communicator are the
// communicator's (as they are in nccl-tests' loop), and the time an operation spent behind earlier ones is not.
void CommMonitor::count(const OpFields& f) const {
  const OpKind kind = static_cast<OpKind>(f.kind);
  const bool failed = f.state == static_cast<uint8_t>(OpState::kFailed);
  const uint64_t ns = f.end_ns > f.start_ns ? f.end_ns - f.start_ns : 0;
  const uint64_t from = std::min(f.start_ns, std::max(f.enqueue_ns, last_end_ns_));
  last_end_ns_ = f.end_ns;
  stats_.add(kind, static_cast<Algo>(f.algo), f.bytes, ns, f.end_ns > from ? f.end_ns - from : 0, failed);
  if (straggler_ && !is_p2p(kind)) straggler_->count(f.coll_index, ns, failed);
}

uint64_t CommMonitor::in_flight() const {
  const uint64_t issued = ring_->header().last_enqueued.load(std::memory_order_relaxed);
  const uint64_t done = ring_->finished_through();
  return issued > done ? issued - done : 0;
}

std::string CommMonitor::label() const {
  return setup_.generation == 0 ? setup_.comm : setup_.comm + "#" + std::to_string(setup_.generation);
}

StragglerVerdict CommMonitor::verdict() const { return straggler_ ? straggler_->verdict() : StragglerVerdict{}; }

void CommMonitor::service_tick() {
  if (straggler_) straggler_->tick();
}

void CommMonitor::catch_up() {
  aggregate();
  if (device() != nullptr) consume_device();
}

void CommMonitor::retire() { MonitorService::instance().retire(this); }

DeviceOps* CommMonitor::attach_device(std::shared_ptr<DeviceOpSource> source, const std::string& transport,
                                      size_t capacity) {
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (device_ops_) return nullptr;  // one device path per communicator
  const Knobs& k = knobs();
  const MonitorSetup& s = setup_;
  RingIdentity who{s.rank, s.size, s.generation, s.hosts[static_cast<size_t>(s.rank)], s.comm, transport};
  const std::string file = k.flight_dir.empty() ? std::string() : flight_file(s, "-dev");
  const size_t want = capacity > 0 ? capacity : static_cast<size_t>(std::max<int64_t>(k.monitor_records, kMinRecords));
  auto ops = DeviceOps::create(want, who, file);
  if (!ops.ok()) {
    ZW_WARN(kColl, "device operations of communicator '%s' are not recorded: %s", s.comm.c_str(),
            ops.status().to_string().c_str());
    return nullptr;
  }
  device_ops_ = std::move(ops.value());
  device_source_ = std::move(source);
  device_.store(device_ops_.get(), std::memory_order_release);
  return device_ops_.get();
}

void CommMonitor::consume_device() {
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (device_source_) device_ops_->consume(*device_source_);
}

void CommMonitor::detach_device() {
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (!device_source_) return;
  device_ops_->consume(*device_source_);
  device_source_.reset();
}

}  // namespace zw::internal::monitor
