// hwloc-based topology summary.
#include "common/topology.h"

#include <hwloc.h>

#include <cstdio>

namespace zw {
namespace {

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

}  // namespace zw
