// What `zw_info` prints about RDMA: every device and port (state, link layer, MTU, speed), the port's GID
// entries (index, IB / RoCE v1 / RoCE v2, address) with the one the transport would choose marked, and the
// GPUDirect RDMA mode (verbs_gpudirect.h).
// Non-goals: counters, firmware versions, the full ibv_devinfo -v dump (use ibv_devinfo for that).
#pragma once

#include <string>

namespace zw::transport::verbs {

// A multi-line, human-readable report; never fails (problems are part of the text).
std::string rdma_report();

}  // namespace zw::transport::verbs
