// collectives/monitor/gauges.h — the process's gauges set through zerowire/metrics.h, rendered for the endpoint
// (Prometheus text, one family per name, samples in the order first set) and the JSON dump.
#pragma once

#include <string>

namespace zw::internal::monitor {

// Every gauge family: "# HELP", "# TYPE ... gauge" and one sample per label set ("" when none was set).
std::string render_gauges_prometheus();
// A JSON array of {"name", "labels": {...}, "value"} objects ("[]" when none was set).
std::string render_gauges_json();

}  // namespace zw::internal::monitor
