// Prometheus text and JSON renderings of the monitors (see exporter.h).
#include "collectives/monitor/exporter.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <functional>

#include "collectives/monitor/comm_monitor.h"
#include "common/clock.h"
#include "common/socket.h"

namespace zw::internal::monitor {
namespace {

constexpr size_t kJsonRecords = 64;  // records per communicator in the JSON

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string escape(const std::string& s) {  // for label values and JSON strings alike
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (static_cast<unsigned char>(c) >= 32)
      out += c;
  }
  return out;
}

const char* state_name(uint8_t s) {
  switch (static_cast<OpState>(s)) {
    case OpState::kRunning:
      return "running";
    case OpState::kDone:
      return "done";
    case OpState::kFailed:
      return "failed";
    case OpState::kEmpty:
      break;
  }
  return "empty";
}

std::string comm_labels(const CommMonitor& m) {
  return "comm=\"" + escape(m.label()) + "\",rank=\"" + std::to_string(m.setup().rank) + "\"";
}

// One non-empty aggregate cell, with its labels.
struct Cell {
  const CommMonitor* m;
  int kind, bucket;
  const StatCell* c;
  std::string labels;  // comm, rank, op, transport, algo, size_le_bytes
};

// The cells of one set of aggregates (the host path's, or the device path's with its own transport and algorithms).
void add_cells(std::vector<Cell>& out, const CommMonitor& m, const OpStats& stats, const std::string& transport,
               bool device) {
  for (int k = 0; k < kNumKinds; ++k)
    for (int b = 0; b < kSizeBuckets; ++b) {
      const StatCell& c = stats.cell(k, b);
      if (c.count.load(std::memory_order_relaxed) == 0) continue;
      const uint8_t algo = c.algo.load(std::memory_order_relaxed);
      std::string l = comm_labels(m) + ",op=\"" + op_kind_name(static_cast<OpKind>(k)) + "\",transport=\"" +
                      escape(transport) + "\",algo=\"" +
                      (device ? device_algo_name(algo) : algo_name(static_cast<Algo>(algo))) + "\",size_le_bytes=\"" +
                      std::to_string(size_bucket_bound(b)) + "\"";
      out.push_back(Cell{&m, k, b, &c, std::move(l)});
    }
}

std::vector<Cell> cells_of(const std::vector<std::shared_ptr<CommMonitor>>& ms) {
  std::vector<Cell> out;
  for (const auto& m : ms) {
    add_cells(out, *m, m->stats(), m->setup().transport, false);
    if (const DeviceOps* d = m->device()) add_cells(out, *m, d->stats(), d->ring().header().transport, true);
  }
  return out;
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name + "{" + labels + "} " + num(v) + "\n";
}

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

void render_cells(std::string& out, const std::vector<Cell>& cells) {
  using Get = std::function<double(const Cell&)>;
  auto simple = [&](const char* name, const char* type, const char* help, const Get& get) {
    family(out, name, type, help);
    for (const Cell& c : cells) sample(out, name, c.labels, get(c));
  };
  auto ld = [](const std::atomic<uint64_t>& a) { return static_cast<double>(a.load(std::memory_order_relaxed)); };
  simple("zerowire_operations_total", "counter", "Operations finished.", [&](const Cell& c) { return ld(c.c->count); });
  simple("zerowire_operation_bytes_total", "counter", "Bytes moved by finished operations (nccl-tests size).",
         [&](const Cell& c) { return ld(c.c->bytes); });
  simple("zerowire_operation_errors_total", "counter", "Operations that failed.",
         [&](const Cell& c) { return ld(c.c->errors); });
  auto algbw = [](const Cell& c) { return algbw_Bps(*c.c); };
  simple("zerowire_algbw_bytes_per_second", "gauge",
         "Algorithm bandwidth: bytes over service time of the cell's timed operations (every host operation: from its "
         "issue, or the end of the one ahead of it, to its end; a sample of small device ones: run time).",
         algbw);
  simple("zerowire_busbw_bytes_per_second", "gauge", "Bus bandwidth: algbw times nccl-tests' factor for the operation.",
         [&](const Cell& c) { return algbw(c) * bus_factor(static_cast<OpKind>(c.kind), c.m->setup().size); });
  family(out, "zerowire_operation_duration_seconds", "histogram",
         "Run time of timed operations (start to end; every host operation, a sample of small device ones).");
  for (const Cell& c : cells) {
    auto counts = c.c->latency.copy();
    uint64_t cum = 0;
    for (int k = 0; k < LatencyHistogram::kFinite; ++k) {
      cum += counts[static_cast<size_t>(k)];
      sample(out, "zerowire_operation_duration_seconds_bucket",
             c.labels + ",le=\"" + num(seconds(LatencyHistogram::upper_ns(k))) + "\"", static_cast<double>(cum));
    }
    cum += counts[LatencyHistogram::kFinite];
    sample(out, "zerowire_operation_duration_seconds_bucket", c.labels + ",le=\"+Inf\"", static_cast<double>(cum));
    sample(out, "zerowire_operation_duration_seconds_sum", c.labels, ld(c.c->time_ns) / 1e9);
    sample(out, "zerowire_operation_duration_seconds_count", c.labels, static_cast<double>(cum));
  }
  family(out, "zerowire_operation_duration_quantile_seconds", "gauge", "Run-time percentiles from the histogram.");
  for (const Cell& c : cells) {
    auto counts = c.c->latency.copy();
    for (double q : {0.5, 0.9, 0.99})
      sample(out, "zerowire_operation_duration_quantile_seconds", c.labels + ",quantile=\"" + num(q) + "\"",
             LatencyHistogram::quantile_ns(counts, q) / 1e9);
  }
}

// Per-peer link counters: one family each, a sample per (communicator, peer) that carried anything.
void render_links(std::string& out, const std::vector<std::shared_ptr<CommMonitor>>& ms) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const PeerLinks::Link&);
  };
  static const Family kFamilies[] = {
      {"zerowire_peer_sent_bytes_total", "counter", "Payload bytes this rank wrote to the peer.",
       [](const PeerLinks::Link& l) { return static_cast<double>(l.sent_bytes.load(std::memory_order_relaxed)); }},
      {"zerowire_peer_received_bytes_total", "counter", "Payload bytes this rank received from the peer.",
       [](const PeerLinks::Link& l) { return static_cast<double>(l.received_bytes.load(std::memory_order_relaxed)); }},
      {"zerowire_peer_wait_seconds_total", "counter", "Time this rank was blocked waiting for the peer's data.",
       [](const PeerLinks::Link& l) { return static_cast<double>(l.wait_ns.load(std::memory_order_relaxed)) / 1e9; }},
      {"zerowire_peer_waits_total", "counter", "Waits for the peer's data that found it missing (and blocked).",
       [](const PeerLinks::Link& l) { return static_cast<double>(l.waits.load(std::memory_order_relaxed)); }},
  };
  for (const Family& f : kFamilies) {
    family(out, f.name, f.type, f.help);
    for (const auto& m : ms)
      for (int p = 0; p < m->links().size(); ++p) {
        const PeerLinks::Link& l = m->links().link(p);
        if (l.sent_bytes.load(std::memory_order_relaxed) == 0 && l.received_bytes.load(std::memory_order_relaxed) == 0)
          continue;
        sample(out, f.name, comm_labels(*m) + ",peer=\"" + std::to_string(p) + "\"", f.value(l));
      }
  }
}

// Per communicator and path ("host", and "device" once the device path is attached): in flight, issued, current.
void render_comms(std::string& out, const std::vector<std::shared_ptr<CommMonitor>>& ms) {
  struct View {
    const CommMonitor* m;
    const RecordRing* ring;
    uint64_t in_flight;
    std::string labels;  // comm, rank, path
  };
  std::vector<View> views;
  for (const auto& m : ms) {
    views.push_back(View{m.get(), &m->ring(), m->in_flight(), comm_labels(*m) + ",path=\"host\""});
    if (const DeviceOps* d = m->device())
      views.push_back(View{m.get(), &d->ring(), d->in_flight(), comm_labels(*m) + ",path=\"device\""});
  }
  family(out, "zerowire_operations_in_flight", "gauge", "Operations issued and not finished.");
  for (const View& v : views) sample(out, "zerowire_operations_in_flight", v.labels, static_cast<double>(v.in_flight));
  family(out, "zerowire_operations_issued_total", "counter", "Operations issued (the last sequence number).");
  for (const View& v : views)
    sample(out, "zerowire_operations_issued_total", v.labels,
           static_cast<double>(v.ring->header().last_enqueued.load(std::memory_order_relaxed)));
  family(out, "zerowire_device_operations_untracked_total", "counter",
         "Device operations left out of the records: every record slot held an unfinished one.");
  for (const auto& m : ms)
    if (const DeviceOps* d = m->device())
      sample(out, "zerowire_device_operations_untracked_total", comm_labels(*m), static_cast<double>(d->untracked()));
  family(out, "zerowire_current_operation_running_seconds", "gauge",
         "How long the running operation has run (op=\"idle\" and 0 when none runs); seq is its sequence number.");
  for (const View& v : views) {
    OpFields f;
    const bool busy = v.ring->running(&f);
    const uint64_t now = now_ns();
    std::string l = v.labels + ",op=\"" + (busy ? op_kind_name(static_cast<OpKind>(f.kind)) : "idle") + "\",seq=\"" +
                    std::to_string(busy ? f.seq : 0) + "\"";
    sample(out, "zerowire_current_operation_running_seconds", l,
           busy && now > f.start_ns ? seconds(now - f.start_ns) : 0);
  }
  render_links(out, ms);
  struct Family {
    const char* name;
    const char* help;
    double (*value)(const StragglerVerdict&, size_t);
  };
  static const Family kFamilies[] = {
      {"zerowire_straggler_last_share",
       "Share of the last judged window's collectives this peer arrived last at (rank 0 judges).",
       [](const StragglerVerdict& v, size_t r) { return v.last_share[r]; }},
      {"zerowire_straggler_lateness_seconds", "Median lateness behind the next-latest rank when last.",
       [](const StragglerVerdict& v, size_t r) { return v.median_late_ns[r] / 1e9; }},
      {"zerowire_straggler_named", "1 for the rank named a straggler in the last judged window.",
       [](const StragglerVerdict& v, size_t r) { return v.named == static_cast<int>(r) ? 1.0 : 0.0; }},
  };
  family(out, "zerowire_monitor_writer_counts_total", "counter",
         "Times an operation's path counted the records itself: the counting thread was half a ring behind.");
  for (const auto& m : ms)
    sample(out, "zerowire_monitor_writer_counts_total", comm_labels(*m), static_cast<double>(m->writer_counts()));
  family(out, "zerowire_straggler_windows_judged_total", "counter",
         "Straggler windows rank 0 judged (every rank published its run times of the window rank 0 asked for).");
  family(out, "zerowire_straggler_windows_missed_total", "counter",
         "Straggler windows rank 0 asked for and could not judge (a rank's capture missed or never came).");
  for (const auto& m : ms) {
    if (m->setup().rank != 0) continue;
    sample(out, "zerowire_straggler_windows_judged_total", comm_labels(*m), static_cast<double>(m->windows_judged()));
    sample(out, "zerowire_straggler_windows_missed_total", comm_labels(*m), static_cast<double>(m->windows_missed()));
  }
  std::vector<std::pair<const CommMonitor*, StragglerVerdict>> verdicts;
  for (const auto& m : ms)
    if (m->windows_judged() > 0) verdicts.emplace_back(m.get(), m->verdict());
  for (const Family& f : kFamilies) {
    family(out, f.name, "gauge", f.help);
    for (const auto& [m, v] : verdicts)
      for (size_t r = 0; r < v.last_share.size(); ++r)
        sample(out, f.name, comm_labels(*m) + ",peer_rank=\"" + std::to_string(r) + "\"", f.value(v, r));
  }
}

}  // namespace

std::string render_prometheus(const std::vector<std::shared_ptr<CommMonitor>>& ms) {
  std::string out;
  render_cells(out, cells_of(ms));
  render_comms(out, ms);
  return out;
}

std::string record_json(const OpFields& f) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"seq\":%" PRIu64 ",\"coll_index\":%" PRIu64
                ",\"op\":\"%s\",\"algo\":\"%s\",\"dtype\":\"%s\","
                "\"redop\":\"%s\",\"root\":%u,\"count\":%" PRIu64 ",\"bytes\":%" PRIu64
                ",\"path\":\"%s\","
                "\"state\":\"%s\",\"status\":\"%s\",\"enqueue_ns\":%" PRIu64 ",\"start_ns\":%" PRIu64
                ",\"end_ns\":%" PRIu64 ",\"timed\":%s}",
                f.seq, f.coll_index, op_kind_name(static_cast<OpKind>(f.kind)),
                f.path == static_cast<uint8_t>(PathKind::kDevice) ? device_algo_name(f.algo)
                                                                  : algo_name(static_cast<Algo>(f.algo)),
                dtype_name(static_cast<DataType>(f.dtype)), reduce_op_name(static_cast<ReduceOp>(f.redop)), f.root,
                f.count, f.bytes, f.path == static_cast<uint8_t>(PathKind::kDevice) ? "device" : "host",
                state_name(f.state), code_name(static_cast<Code>(f.status)), f.enqueue_ns, f.start_ns, f.end_ns,
                (f.flags & kRecordUntimed) != 0 ? "false" : "true");
  return buf;
}

namespace {

// The non-empty cells of one set of aggregates as a JSON array.
std::string stats_json(const OpStats& stats, int world_size, bool device) {
  std::string out = "[";
  bool first = true;
  for (int k = 0; k < kNumKinds; ++k)
    for (int b = 0; b < kSizeBuckets; ++b) {
      const StatCell& c = stats.cell(k, b);
      const uint64_t n = c.count.load(std::memory_order_relaxed);
      if (n == 0) continue;
      const double bytes = static_cast<double>(c.bytes.load()), timed_bytes = static_cast<double>(c.timed_bytes.load());
      const double algbw = algbw_Bps(c);
      const uint8_t algo = c.algo.load();
      auto counts = c.latency.copy();
      out += std::string(first ? "" : ",") + "{\"op\":\"" + op_kind_name(static_cast<OpKind>(k)) + "\",\"algo\":\"" +
             (device ? device_algo_name(algo) : algo_name(static_cast<Algo>(algo))) +
             "\",\"size_le_bytes\":" + std::to_string(size_bucket_bound(b)) + ",\"count\":" + std::to_string(n) +
             ",\"bytes\":" + num(bytes) + ",\"timed_bytes\":" + num(timed_bytes) +
             ",\"time_s\":" + num(seconds(c.time_ns.load())) + ",\"service_s\":" + num(seconds(c.service_ns.load())) +
             ",\"errors\":" + std::to_string(c.errors.load()) + ",\"algbw_Bps\":" + num(algbw) +
             ",\"busbw_Bps\":" + num(algbw * bus_factor(static_cast<OpKind>(k), world_size)) +
             ",\"p50_s\":" + num(LatencyHistogram::quantile_ns(counts, 0.5) / 1e9) +
             ",\"p90_s\":" + num(LatencyHistogram::quantile_ns(counts, 0.9) / 1e9) +
             ",\"p99_s\":" + num(LatencyHistogram::quantile_ns(counts, 0.99) / 1e9) + "}";
      first = false;
    }
  return out + "]";
}

// "running", "running_for_s" and the last records of a ring, as JSON members (no braces).
std::string ring_json(const RecordRing& ring) {
  OpFields cur;
  const bool busy = ring.running(&cur);
  const uint64_t now = now_ns();
  std::string out = "\"running\":" + (busy ? record_json(cur) : std::string("null")) +
                    ",\"running_for_s\":" + num(busy && now > cur.start_ns ? seconds(now - cur.start_ns) : 0) +
                    ",\"records\":[";
  std::vector<OpFields> recs = ring.snapshot();
  const size_t from = recs.size() > kJsonRecords ? recs.size() - kJsonRecords : 0;
  for (size_t i = from; i < recs.size(); ++i) out += (i > from ? "," : "") + record_json(recs[i]);
  return out + "]";
}

// The device path of a communicator: null before its first device operation.
std::string device_json(const CommMonitor& m) {
  const DeviceOps* d = m.device();
  if (d == nullptr) return "null";
  const RingHeader& h = d->ring().header();
  return "{\"transport\":\"" + escape(h.transport) + "\",\"issued\":" + std::to_string(d->issued()) +
         ",\"in_flight\":" + std::to_string(d->in_flight()) + ",\"untracked\":" + std::to_string(d->untracked()) +
         ",\"failed\":" + (h.failed.load() ? "\"" + escape(h.reason) + "\"" : std::string("null")) +
         ",\"flight_file\":\"" + escape(d->ring().file()) +
         "\",\"stats\":" + stats_json(d->stats(), m.setup().size, true) + "," + ring_json(d->ring()) + "}";
}

}  // namespace

std::string render_comm_json(const CommMonitor& m) {
  const MonitorSetup& s = m.setup();
  const RingHeader& h = m.ring().header();
  std::string out =
      "{\"comm\":\"" + escape(m.label()) + "\",\"rank\":" + std::to_string(s.rank) +
      ",\"size\":" + std::to_string(s.size) + ",\"transport\":\"" + escape(s.transport) +
      "\",\"issued\":" + std::to_string(h.last_enqueued.load()) + ",\"in_flight\":" + std::to_string(m.in_flight()) +
      ",\"failed\":" + (h.failed.load() ? "\"" + escape(h.reason) + "\"" : std::string("null")) +
      ",\"flight_file\":\"" + escape(m.ring().file()) + "\",\"stats\":" + stats_json(m.stats(), s.size, false);
  out += ",\"peers\":[";
  bool first = true;
  for (int p = 0; p < m.links().size(); ++p) {
    const PeerLinks::Link& l = m.links().link(p);
    if (l.sent_bytes.load() == 0 && l.received_bytes.load() == 0) continue;
    out += std::string(first ? "" : ",") + "{\"peer\":" + std::to_string(p) +
           ",\"sent_bytes\":" + std::to_string(l.sent_bytes.load()) +
           ",\"received_bytes\":" + std::to_string(l.received_bytes.load()) +
           ",\"wait_s\":" + num(seconds(l.wait_ns.load())) + ",\"waits\":" + std::to_string(l.waits.load()) + "}";
    first = false;
  }
  out += "],\"writer_counts\":" + std::to_string(m.writer_counts()) +
         ",\"straggler_windows\":{\"judged\":" + std::to_string(m.windows_judged()) +
         ",\"missed\":" + std::to_string(m.windows_missed()) + "},\"straggler\":";
  if (m.windows_judged() == 0) {
    out += "null";
  } else {
    StragglerVerdict v = m.verdict();
    out += "{\"window\":" + std::to_string(v.window) + ",\"ops\":" + std::to_string(v.ops) +
           ",\"named\":" + std::to_string(v.named) + ",\"last_share\":[";
    for (size_t r = 0; r < v.last_share.size(); ++r) out += (r ? "," : "") + num(v.last_share[r]);
    out += "],\"median_late_s\":[";
    for (size_t r = 0; r < v.median_late_ns.size(); ++r) out += (r ? "," : "") + num(v.median_late_ns[r] / 1e9);
    out += "]}";
  }
  return out + "," + ring_json(m.ring()) + ",\"device\":" + device_json(m) + "}";
}

std::string render_process_json(const std::vector<std::string>& parts, const std::string& gauges_json) {
  std::string out = "{\"host\":\"" + escape(net::hostname()) + "\",\"pid\":" + std::to_string(getpid()) +
                    ",\"time_unix_s\":" + num(static_cast<double>(std::time(nullptr))) + ",\"communicators\":[";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "," : "") + parts[i];
  return out + "],\"gauges\":" + gauges_json + "}\n";
}

std::string escape_text(const std::string& s) { return escape(s); }
std::string format_number(double v) { return num(v); }

}  // namespace zw::internal::monitor
