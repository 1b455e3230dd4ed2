// Host topology summary from hwloc: cores, NUMA nodes and PCI devices of interest (GPUs, NICs, HCAs).
// Used by zw_info and by later placement decisions (NIC/GPU affinity); usable_cpus() by the shm transport and the host
// helper threads. Non-goals: binding threads.
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

// The CPUs this process may run on: its affinity mask, lowered by the smallest CPU quota of its cgroup and their
// ancestors (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us: a container's `--cpus`); at least 1.
int usable_cpus();
// The CPUs a cgroup CPU quota allows, from cgroup v2's cpu.max text ("QUOTA PERIOD", or "max PERIOD": none) or v1's
// quota and period joined the same way (quota -1: none), rounded down to at least 1; 0 when there is no quota.
int cpus_of_quota(const std::string& text);

}  // namespace zw
