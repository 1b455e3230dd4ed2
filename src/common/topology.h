// Host topology summary from hwloc: cores, NUMA nodes and PCI devices of interest (GPUs, NICs, HCAs).
// Used by zw_info and by later placement decisions (NIC/GPU affinity). Non-goals: binding threads.
#pragma once

#include <string>
#include <vector>

#include "zerowire/status.h"

namespace zw {

struct PciDevice {
  std::string bus_id;     // "0000:17:00.0"
  std::string kind;       // "gpu", "network", "infiniband", "other"
  std::string name;       // hwloc's name for the device or its OS device ("mlx5_0", "eth0")
  int numa_node = -1;     // NUMA node the device is attached to, -1 when unknown
};

struct Topology {
  int packages = 0;       // CPU sockets
  int cores = 0;          // physical cores
  int hw_threads = 0;     // logical CPUs
  int numa_nodes = 0;     // NUMA nodes (1 on UMA machines)
  std::vector<PciDevice> pci;  // GPUs, NICs and HCAs found
};

Result<Topology> load_topology();

// Multi-line human summary for zw_info.
std::string describe(const Topology& topo);

}  // namespace zw
