// collectives/monitor/exporter.h — the monitors' state as text: Prometheus exposition format (version 0.0.4) for
// the endpoint, and JSON for the dump. Metric names follow Prometheus conventions (zerowire_ prefix, base units,
// _total for counters, _seconds, _bytes); the families are listed in README.md ("Monitoring").
// Non-goals: OpenMetrics exemplars, protobuf exposition.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/monitor/op_record.h"

namespace zw::internal::monitor {

class CommMonitor;

// Every family for every monitor, each family's samples together (as the format requires).
std::string render_prometheus(const std::vector<std::shared_ptr<CommMonitor>>& monitors);
// One communicator as a JSON object: identity, aggregates, straggler verdict, the running operation and the last
// records.
std::string render_comm_json(const CommMonitor& m);
// {"host", "pid", "time_unix_s", "communicators": [parts...], "gauges": gauges_json} (gauges.h; "[]": none).
std::string render_process_json(const std::vector<std::string>& comm_objects, const std::string& gauges_json = "[]");
// The renderings' own escaping (label values and JSON strings alike) and number format, for gauges.cc.
std::string escape_text(const std::string& s);
std::string format_number(double v);
// One record as a JSON object.
std::string record_json(const OpFields& f);

}  // namespace zw::internal::monitor
