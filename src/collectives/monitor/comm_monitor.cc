// One communicator's monitoring: hooks on the hot path, and the straggler exchange on the service thread.
#include "collectives/monitor/comm_monitor.h"

#include <unistd.h>

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
  if (k.straggler_window > 0 && s.size > 1 && s.store) {
    m->window_ = std::min(static_cast<size_t>(k.straggler_window), kMaxWindow);
    m->capture_.runs.assign(m->window_, 0);
  }
  MonitorService::instance().add(m);
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

// The two hooks run on every operation's path: they write the record and nothing else (see the threading note in
// comm_monitor.h). `hot` puts them in .text.hot beside the compiler's other hot code: in the 4 KiB all-gather benchmark
// their code otherwise shared L1 instruction-cache sets with the collective's own path (callgrind --cache-sim, world
// size 1: 11 I1 misses per operation with monitoring on, none off; none with `hot`).
__attribute__((hot)) void CommMonitor::on_start(const OpDesc& desc, uint64_t seq, int64_t enqueue_ns, int64_t start_ns,
                                                PathKind path) {
  Hot& h = hot_;
  OpFields f;
  f.seq = seq;
  f.coll_index = is_p2p(desc.kind) ? 0 : h.coll_index++;
  f.count = desc.count;
  f.enqueue_ns = static_cast<uint64_t>(enqueue_ns);
  f.start_ns = static_cast<uint64_t>(start_ns);
  f.kind = static_cast<uint8_t>(desc.kind);
  f.algo = static_cast<uint8_t>(desc.algo);
  f.dtype = static_cast<uint8_t>(desc.dtype);
  f.redop = static_cast<uint8_t>(desc.op);
  f.path = static_cast<uint8_t>(path);
  f.root = desc.root;
  h.seq = seq;
  h.packed = h.ring.begin(h.next++, f);  // never 0: its state is kRunning
}

__attribute__((hot)) void CommMonitor::on_finish(const Status& status, int64_t end_ns) {
  Hot& h = hot_;
  if (h.packed == 0) return;
  const bool failed = !status.ok();
  h.ring.finish(h.next - 1, h.packed, static_cast<uint64_t>(end_ns), failed ? OpState::kFailed : OpState::kDone,
                static_cast<uint16_t>(status.code()));
  h.packed = 0;
  finished_seq_.store(h.seq, std::memory_order_relaxed);
  if (failed && !failed_) {
    ring_->mark_failed(status.message());
    failed_ = true;
  }
  if (h.next % kCheckEvery == 0 && h.next - counted_.load(std::memory_order_relaxed) >= h.help_at) help_aggregate();
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
  }
  for (; i < written; ++i) {
    OpFields f;
    const RecordRing::Read r = ring_->read_finished(i, &f);
    if (r == RecordRing::Read::kUnfinished) break;  // the running operation (records finish in order)
    if (r == RecordRing::Read::kGone)
      lost_.fetch_add(1, std::memory_order_relaxed);
    else
      count(f);
  }
  counted_.store(i, std::memory_order_release);
}

// One finished record into the aggregates and, for a collective of the window asked for, its run time into the
// straggler capture.
void CommMonitor::count(const OpFields& f) const {
  const OpKind kind = static_cast<OpKind>(f.kind);
  const bool failed = f.state == static_cast<uint8_t>(OpState::kFailed);
  const uint64_t ns = f.end_ns > f.start_ns ? f.end_ns - f.start_ns : 0;
  stats_.add(kind, static_cast<Algo>(f.algo), f.bytes, ns, failed);
  if (window_ == 0 || is_p2p(kind)) return;
  next_coll_ = f.coll_index + 1;
  Capture& c = capture_;
  if (failed) windows_stopped_ = true;
  if (c.window < 0 || c.missed || c.fill == window_) return;
  const uint64_t first = static_cast<uint64_t>(c.window) * window_;
  if (f.coll_index < first) return;
  if (failed || f.coll_index != first + c.fill) {  // a record of the window lost (or the communicator failed)
    c.missed = true;
    return;
  }
  c.runs[c.fill++] = static_cast<uint32_t>(std::min<uint64_t>(ns / 1000, UINT32_MAX));
}

uint64_t CommMonitor::in_flight() const {
  const uint64_t issued = ring_->header().last_enqueued.load(std::memory_order_relaxed);
  const uint64_t done = finished_seq_.load(std::memory_order_relaxed);
  return issued > done ? issued - done : 0;
}

std::string CommMonitor::label() const {
  return setup_.generation == 0 ? setup_.comm : setup_.comm + "#" + std::to_string(setup_.generation);
}

StragglerVerdict CommMonitor::verdict() const {
  std::lock_guard<std::mutex> lock(verdict_mutex_);
  return verdict_;
}

std::string CommMonitor::window_key(uint64_t window, int rank) const {
  return "monitor/straggler/" + std::to_string(window) + "/" + std::to_string(rank);
}

void CommMonitor::catch_up() {
  aggregate();
  if (device() != nullptr) consume_device();
}

// The straggler exchange. Which windows are judged is rank 0's choice, told through the store's counter
// `monitor/straggler/ask` (the window + 1): every rank captures that window's run times as its counting reaches it,
// publishes them, and rank 0 judges once all are there, then asks for another. So every rank publishes the same
// windows whatever the operations' rate (a window of 1,000 4 KiB all-gathers lasts ~2 ms, a tick 50 ms), and the
// store sees a few requests per rank per tick: the others read the counter while they have nothing to capture, and
// set one key per window.
namespace {
constexpr double kLeadS = 0.25;   // how far ahead of its own counting rank 0 asks (the others see the ask a tick or
                                  // a few later: their service threads may wait for a core)
constexpr int kMaxLeadShift = 6;  // the lead doubles with each window missed in a row, up to 64×
constexpr int kGiveUpTicks = 40;  // rank 0 gives up on a window this many ticks after publishing its own capture
const char* const kAskKey = "monitor/straggler/ask";
}  // namespace

// Begins capturing `window`; one counted already (the ask came too late), or any after a failed collective, is
// published as missed at once.
void CommMonitor::start_capture(Store& store, int64_t window) {
  bool missed;
  {
    std::lock_guard<std::mutex> lock(count_mutex_);
    Capture& c = capture_;
    c.window = window;
    c.fill = 0;
    c.missed = missed = windows_stopped_ || next_coll_ > static_cast<uint64_t>(window) * window_;
  }
  if (missed) publish(store, take_capture());
}

// The capture once it is full or missed (then the counting captures nothing until the next start); else window -1.
CommMonitor::Capture CommMonitor::take_capture() {
  std::lock_guard<std::mutex> lock(count_mutex_);
  Capture& c = capture_;
  if (c.window < 0 || (!c.missed && c.fill < window_)) return Capture{};
  Capture taken{c.window, c.fill, c.missed, {}};
  if (!c.missed) taken.runs = c.runs;
  c.window = -1;
  return taken;
}

uint64_t CommMonitor::colls_counted() const {
  std::lock_guard<std::mutex> lock(count_mutex_);
  return next_coll_;
}

// A missed capture is published as an empty value, so that rank 0 need not wait for it.
void CommMonitor::publish(Store& store, const Capture& t) {
  const std::string value = t.missed ? std::string() : encode_durations(t.runs.data(), t.runs.size());
  ZW_TRACE(kColl, "straggler window %lld: published%s", static_cast<long long>(t.window), t.missed ? " (missed)" : "");
  Status s = store.set(window_key(static_cast<uint64_t>(t.window), setup_.rank), value);
  if (!s.ok())
    ZW_INFO(kColl, "straggler window %lld not published: %s", static_cast<long long>(t.window), s.to_string().c_str());
  published_ = true;
}

void CommMonitor::service_tick() {
  if (window_ == 0) return;
  Store& store = *setup_.store;
  if (setup_.rank == 0) {
    if (Capture t = take_capture(); t.window >= 0) publish(store, t);
    drive_judge(store);
  } else {
    follow_ask(store);
  }
}

// Ranks other than 0: publish a finished capture if rank 0 still wants it, and while nothing is being captured, read
// which window rank 0 wants now (one request per tick).
void CommMonitor::follow_ask(Store& store) {
  Capture t = take_capture();
  if (asked_ >= 0 && !published_ && t.window < 0) return;  // capturing
  Result<int64_t> ask = store.add(kAskKey, 0);
  const int64_t wanted = ask.ok() ? ask.value() - 1 : asked_;
  if (t.window >= 0) {
    if (t.window == wanted)
      publish(store, t);
    else
      published_ = true;  // rank 0 gave up on it meanwhile: dropped, so that no key is left behind
  }
  if (wanted <= asked_) return;
  ZW_TRACE(kColl, "straggler window %lld: capturing (%llu collectives counted)", static_cast<long long>(wanted),
           static_cast<unsigned long long>(colls_counted()));
  asked_ = wanted;
  published_ = false;
  start_capture(store, asked_);
}

// Rank 0: judges the window it asked for once every rank published it (or gives up on it), then asks for the next.
void CommMonitor::drive_judge(Store& store) {
  const int64_t now = static_cast<int64_t>(now_ns());
  const uint64_t colls = colls_counted();
  const bool first = rate_ns_ == 0;
  if (!first && now > rate_ns_) rate_ = double(colls - rate_colls_) * 1e9 / double(now - rate_ns_);
  rate_colls_ = colls;
  rate_ns_ = now;
  if (first) return;  // the lead needs the collectives' rate: the first ask waits a tick
  if (asked_open_) judge_asked(store);
  if (!asked_open_) ask_next(store);
}

void CommMonitor::ask_next(Store& store) {
  // The first window that starts at least kLeadS (× 2^misses) of collectives beyond what rank 0 has counted (and at
  // least a window ahead).
  const double lead = kLeadS * double(1 << std::min(misses_in_row_, kMaxLeadShift));
  const uint64_t ahead = std::max<uint64_t>(static_cast<uint64_t>(rate_ * lead), window_);
  const uint64_t from = colls_counted() + ahead;
  const int64_t window = static_cast<int64_t>((from + window_ - 1) / window_);
  Result<int64_t> ask = store.add(kAskKey, window + 1 - ask_value_);
  if (!ask.ok()) {
    ZW_INFO(kColl, "straggler window %lld not asked for: %s", static_cast<long long>(window),
            ask.status().to_string().c_str());
    return;
  }
  ZW_TRACE(kColl, "straggler window %lld asked for (%llu collectives counted, %.0f/s)", static_cast<long long>(window),
           static_cast<unsigned long long>(colls_counted()), rate_);
  ask_value_ = ask.value();
  asked_ = window;
  asked_open_ = true;
  published_ = false;
  ticks_waited_ = 0;
  start_capture(store, window);
}

void CommMonitor::judge_asked(Store& store) {
  if (!published_) return;  // rank 0's own capture is not complete yet
  std::vector<std::string> keys;
  for (int r = 0; r < setup_.size; ++r) keys.push_back(window_key(static_cast<uint64_t>(asked_), r));
  const bool all = store.wait(keys, Store::Timeout(0)).ok();  // answers at once
  if (!all && ++ticks_waited_ < kGiveUpTicks) return;
  std::vector<std::vector<uint32_t>> runs(static_cast<size_t>(setup_.size));
  bool whole = all;
  for (int r = 0; r < setup_.size; ++r) {
    const std::string& key = keys[static_cast<size_t>(r)];
    if (whole) {
      auto value = store.get(key, Store::Timeout(0));
      whole = value.ok() && decode_durations(value.value(), window_, &runs[static_cast<size_t>(r)]);
    }
    (void)store.del(key);
  }
  asked_open_ = false;
  const char* outcome = whole ? "judged" : all ? "missed by a rank" : "given up";
  ZW_TRACE(kColl, "straggler window %lld: %s", static_cast<long long>(asked_), outcome);
  if (!whole) {
    ++misses_in_row_;
    missed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  misses_in_row_ = 0;
  const Knobs& k = knobs();
  StragglerVerdict v = judge_window(runs, k.straggler_share, k.straggler_min_us * 1000.0);
  v.window = static_cast<uint64_t>(asked_);
  if (v.named >= 0) {
    const size_t r = static_cast<size_t>(v.named);
    log::set_thread_rank(setup_.rank);  // the verdict is rank 0's
    ZW_WARN(kColl,
            "straggler: rank %d (host %s, pid %d) arrived last at %.0f%% of the last %llu collectives of "
            "communicator '%s', median %.2f ms behind the next-latest rank (ZW_STRAGGLER_WINDOW/_SHARE/_MIN_US)",
            v.named, setup_.hosts[r].c_str(), setup_.pids[r], 100.0 * v.last_share[r],
            static_cast<unsigned long long>(v.ops), label().c_str(), v.median_late_ns[r] / 1e6);
  }
  {
    std::lock_guard<std::mutex> lock(verdict_mutex_);
    verdict_ = std::move(v);
  }
  judged_.fetch_add(1, std::memory_order_relaxed);
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
