// hwloc-based topology summary.
#include "common/topology.h"

#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

namespace zw {
namespace {

// The smallest CPU quota of this process's cgroup and its ancestors, from cgroup v2's cpu.max or v1's
// cpu.cfs_quota_us and cpu.cfs_period_us (a container's `--cpus`); 0 when none is set or nothing can be read.
int cgroup_cpu_limit() {
  std::ifstream self("/proc/self/cgroup");
  int limit = 0;
  for (std::string line; std::getline(self, line);) {
    // "0::/path" (v2) or "ID:cpu,cpuacct:/path" (v1's cpu controller)
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    const bool v2 = controllers == ",,";
    if (!v2 && controllers.find(",cpu,") == std::string::npos) continue;
    for (std::string path = line.substr(b + 1); !path.empty();) {  // the cgroup, then each ancestor up to the root
      std::string text;
      if (v2) {
        std::ifstream f("/sys/fs/cgroup" + path + "/cpu.max");
        std::getline(f, text);
      } else {
        const std::string dir = "/sys/fs/cgroup/cpu" + path;
        std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
        std::string quota, period;
        if (q >> quota && p >> period) text = quota + " " + period;
      }
      if (const int cpus = cpus_of_quota(text); cpus > 0) limit = limit == 0 ? cpus : std::min(limit, cpus);
      const size_t slash = path.rfind('/');
      path = path == "/" || slash == std::string::npos ? "" : slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  return limit;
}

// RAII holder for an hwloc topology.
struct HwlocTopology {
  hwloc_topology_t topo = nullptr;
  ~HwlocTopology() {
    if (topo) hwloc_topology_destroy(topo);
  }
};

std::string classify(hwloc_obj_t os_dev) {
  switch (os_dev->attr->osdev.type) {
    case HWLOC_OBJ_OSDEV_GPU:
    case HWLOC_OBJ_OSDEV_COPROC: return "gpu";
    case HWLOC_OBJ_OSDEV_NETWORK: return "network";
    case HWLOC_OBJ_OSDEV_OPENFABRICS: return "infiniband";
    default: return "other";
  }
}

int numa_of(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (!parent || !parent->nodeset) return -1;
  int node = hwloc_bitmap_first(parent->nodeset);
  return node;
}

}  // namespace

Result<Topology> load_topology() {
  HwlocTopology h;
  if (hwloc_topology_init(&h.topo) != 0) return Status(Code::kSystem, "hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(h.topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(h.topo) != 0) return Status(Code::kSystem, "hwloc_topology_load failed");
  Topology t;
  t.packages = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_PACKAGE);
  t.cores = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_CORE);
  t.hw_threads = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_PU);
  t.numa_nodes = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_NUMANODE);
  for (hwloc_obj_t os = hwloc_get_next_osdev(h.topo, nullptr); os; os = hwloc_get_next_osdev(h.topo, os)) {
    PciDevice dev;
    dev.kind = classify(os);
    if (dev.kind == "other") continue;
    dev.name = os->name ? os->name : "?";
    hwloc_obj_t pci = hwloc_get_ancestor_obj_by_type(h.topo, HWLOC_OBJ_PCI_DEVICE, os);
    if (pci) {
      char bus[32];
      std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
                    pci->attr->pcidev.dev, pci->attr->pcidev.func);
      dev.bus_id = bus;
    }
    dev.numa_node = numa_of(h.topo, os);
    t.pci.push_back(dev);
  }
  return t;
}

std::string describe(const Topology& t) {
  char line[256];
  std::snprintf(line, sizeof line, "  packages %d, cores %d, hardware threads %d, NUMA nodes %d\n", t.packages, t.cores,
                t.hw_threads, t.numa_nodes);
  std::string out = line;
  if (t.pci.empty()) out += "  no GPU, NIC or HCA PCI devices found\n";
  for (const PciDevice& d : t.pci) {
    std::snprintf(line, sizeof line, "  %-10s %-12s pci %s numa %d\n", d.kind.c_str(), d.name.c_str(),
                  d.bus_id.empty() ? "-" : d.bus_id.c_str(), d.numa_node);
    out += line;
  }
  return out;
}

int cpus_of_quota(const std::string& text) {
  long long quota = 0, period = 0;
  if (std::sscanf(text.c_str(), "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0) return 0;
  return static_cast<int>(std::clamp<long long>(quota / period, 1, 1 << 20));
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  if (const int limit = cgroup_cpu_limit(); limit > 0) cpus = std::min(cpus, limit);
  return std::max(cpus, 1);
}

}  // namespace zw
