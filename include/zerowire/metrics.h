// zerowire/metrics.h — gauges that code above the collectives publishes beside zerowire's own metrics: the ZeRO-3
// engine's and a trainer's figures (tokens/s, step time, exposed communication, gather-pool occupancy) next to the
// per-operation metrics of README.md's "Monitoring", on the same endpoint (ZW_METRICS_PORT) and in the same JSON
// dump (ZW_METRICS_DUMP), under "gauges".
//
// Threading: every function is thread-safe and takes one process-wide lock — call it per step, not per operation.
// Non-goals: counters and histograms (a gauge that only grows is written as one, named *_total by the caller),
// removing a gauge once set.
#pragma once

#include <string>
#include <vector>

namespace zw::metrics {

struct Label {
  std::string name;   // Prometheus label name: [a-zA-Z_][a-zA-Z0-9_]*
  std::string value;  // any text (escaped on output)
};

// Sets the gauge `name` with `labels` to `value`. `name` follows Prometheus conventions (a zerowire_ prefix, base
// units: zerowire_zero3_step_seconds); the first call for a name fixes its help text. Returns false, changing
// nothing, when the name or a label name is not a valid Prometheus name.
bool set_gauge(const std::string& name, const std::string& help, const std::vector<Label>& labels, double value);

}  // namespace zw::metrics
