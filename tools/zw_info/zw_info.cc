// zw_info — tells what this zerowire build contains and how it is configured.
//
//   zw_info [--params]
//
// Prints the version, which backends were built (and why a missing one was not), the transports compiled in,
// the RDMA devices with their ports, GIDs and the GPUDirect RDMA mode (verbs builds), and the host topology from
// hwloc. With --params it adds every ZW_* knob from the knob table with its
// current value (secrets masked), type, default and description, as an aligned table.
// Non-goals: probing peers or the network, benchmarking, changing any setting.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/knobs.h"
#include "common/topology.h"
#include "transport/transport.h"
#include "zerowire/config.h"
#if ZW_HAVE_VERBS
#include "transport/verbs/verbs_report.h"
#endif

namespace {

struct Backend {
  const char* name;     // what the backend is called in this listing
  bool built;           // its ZW_HAVE_* flag
  const char* library;  // what it uses when built
  const char* missing;  // why it was not built
};

constexpr Backend kBackends[] = {
    {"verbs", ZW_HAVE_VERBS != 0, "libibverbs", "libibverbs not found at configure time"},
    {"rdmacm", ZW_HAVE_RDMACM != 0, "librdmacm", "librdmacm not found at configure time"},
    {"cuda", ZW_HAVE_CUDA != 0, "CUDA toolkit", "CUDA toolkit not found at configure time"},
    {"ucx", ZW_HAVE_UCX != 0, "UCX", "UCX support is not part of this version"},
};

const char* type_name(zw::KnobType type) {
  switch (type) {
    case zw::KnobType::kString:
      return "string";
    case zw::KnobType::kInt:
      return "int";
    case zw::KnobType::kBytes:
      return "bytes";
    case zw::KnobType::kDouble:
      return "double";
  }
  return "?";
}

void print_backends() {
  std::printf("backends:\n");
  std::string transports;
  for (const std::string& name : zw::transport::available_transports())
    transports += (transports.empty() ? "" : ", ") + name;
  std::printf("  %-11s %s\n", "transports:", transports.c_str());
  for (const Backend& b : kBackends) {
    std::string label = std::string(b.name) + ":";
    if (b.built)
      std::printf("  %-11s built (%s)\n", label.c_str(), b.library);
    else
      std::printf("  %-11s not built (%s)\n", label.c_str(), b.missing);
  }
}

void print_rdma() {
  std::printf("rdma:\n");
#if ZW_HAVE_VERBS
  std::printf("%s", zw::transport::verbs::rdma_report().c_str());
#else
  std::printf("  not built (libibverbs not found at configure time); GPUDirect RDMA: none\n");
#endif
}

void print_topology() {
  std::printf("topology:\n");
  auto topo = zw::load_topology();
  if (!topo.ok()) {
    std::printf("  unavailable: %s\n", topo.status().message().c_str());
    return;
  }
  std::fputs(zw::describe(*topo).c_str(), stdout);  // already indented, one item a line
}

// Byte counts as the knob table writes them ("64K", "1M"), so that value and default compare at a glance.
std::string bytes_text(const std::string& value) {
  int64_t n = 0;
  if (!zw::parse_bytes(value, &n) || n == 0) return value;
  const char* suffixes[] = {"G", "M", "K"};
  const int shifts[] = {30, 20, 10};
  for (int i = 0; i < 3; ++i) {
    if (n % (int64_t{1} << shifts[i]) == 0) return std::to_string(n >> shifts[i]) + suffixes[i];
  }
  return value;
}

struct KnobRow {
  std::string name, value, type, default_value, description;
};

void print_params() {
  std::vector<KnobRow> rows;
  rows.push_back({"NAME", "VALUE", "TYPE", "DEFAULT", "DESCRIPTION"});
  for (const zw::KnobInfo& info : zw::knob_table()) {
    std::string entry = zw::knob_value_string(zw::knobs(), info);  // "NAME=value"
    std::string value = entry.substr(entry.find('=') + 1);
    if (info.type == zw::KnobType::kBytes) value = bytes_text(value);
    rows.push_back({info.name, value.empty() ? "\"\"" : value, type_name(info.type),
                    *info.default_value ? info.default_value : "\"\"", info.description});
  }
  size_t w_name = 0, w_value = 0, w_type = 0, w_default = 0;
  for (const KnobRow& r : rows) {
    w_name = std::max(w_name, r.name.size());
    w_value = std::max(w_value, r.value.size());
    w_type = std::max(w_type, r.type.size());
    w_default = std::max(w_default, r.default_value.size());
  }
  std::printf("parameters (environment variables):\n");
  for (const KnobRow& r : rows) {
    std::printf("  %-*s  %-*s  %-*s  %-*s  %s\n", static_cast<int>(w_name), r.name.c_str(), static_cast<int>(w_value),
                r.value.c_str(), static_cast<int>(w_type), r.type.c_str(), static_cast<int>(w_default),
                r.default_value.c_str(), r.description.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zw_info: shows the zerowire version, the backends of this build and the host topology."};
  bool params = false;
  app.add_flag("--params", params, "also list every ZW_* knob with its value, type, default and description");
  CLI11_PARSE(app, argc, argv);

  std::printf("zerowire %s\n", ZW_VERSION);
  print_backends();
  print_rdma();
  print_topology();
  if (params) print_params();
  return 0;
}
