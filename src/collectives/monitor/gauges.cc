// zw::metrics::set_gauge and the gauges' renderings (zerowire/metrics.h, gauges.h).
#include "collectives/monitor/gauges.h"

#include <mutex>
#include <utility>
#include <vector>

#include "collectives/monitor/exporter.h"
#include "zerowire/metrics.h"

namespace zw::internal::monitor {
namespace {

struct Sample {
  std::vector<metrics::Label> labels;
  double value = 0;
};
struct Family {
  std::string name, help;
  std::vector<Sample> samples;  // in the order first set
};

std::mutex& gauges_mutex() {
  static std::mutex m;
  return m;
}
std::vector<Family>& families() {  // guarded by gauges_mutex(); few names, so a vector is searched
  static std::vector<Family> f;
  return f;
}

bool valid_name(const std::string& s, bool colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool same_labels(const std::vector<metrics::Label>& a, const std::vector<metrics::Label>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].value != b[i].value) return false;
  return true;
}

std::string prometheus_labels(const std::vector<metrics::Label>& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i)
    out += (i ? "," : "") + labels[i].name + "=\"" + escape_text(labels[i].value) + "\"";
  return out + "}";
}

}  // namespace

std::string render_gauges_prometheus() {
  std::lock_guard<std::mutex> lock(gauges_mutex());
  std::string out;
  for (const Family& f : families()) {
    out += "# HELP " + f.name + " " + f.help + "\n# TYPE " + f.name + " gauge\n";
    for (const Sample& s : f.samples) out += f.name + prometheus_labels(s.labels) + " " + format_number(s.value) + "\n";
  }
  return out;
}

std::string render_gauges_json() {
  std::lock_guard<std::mutex> lock(gauges_mutex());
  std::string out = "[";
  bool first = true;
  for (const Family& f : families()) {
    for (const Sample& s : f.samples) {
      out += std::string(first ? "" : ",") + "{\"name\":\"" + f.name + "\",\"labels\":{";
      for (size_t i = 0; i < s.labels.size(); ++i)
        out += (i ? ",\"" : "\"") + s.labels[i].name + "\":\"" + escape_text(s.labels[i].value) + "\"";
      out += "},\"value\":" + format_number(s.value) + "}";
      first = false;
    }
  }
  return out + "]";
}

}  // namespace zw::internal::monitor

namespace zw::metrics {

bool set_gauge(const std::string& name, const std::string& help, const std::vector<Label>& labels, double value) {
  if (!internal::monitor::valid_name(name, true)) return false;
  for (const Label& l : labels)
    if (!internal::monitor::valid_name(l.name, false)) return false;
  std::lock_guard<std::mutex> lock(internal::monitor::gauges_mutex());
  auto& fams = internal::monitor::families();
  internal::monitor::Family* fam = nullptr;
  for (auto& f : fams)
    if (f.name == name) fam = &f;
  if (fam == nullptr) {
    std::string h = help;  // a HELP line ends at its newline
    for (char& c : h)
      if (c == '\n') c = ' ';
    fam = &fams.emplace_back(internal::monitor::Family{name, h, {}});
  }
  for (auto& s : fam->samples) {
    if (internal::monitor::same_labels(s.labels, labels)) {
      s.value = value;
      return true;
    }
  }
  fam->samples.push_back(internal::monitor::Sample{labels, value});
  return true;
}

}  // namespace zw::metrics
