// Settings of the verbs backend, read in one place (verbs_config.cc) so that each maps onto one knob.
//
// The values come from the ZW_IB_* knobs; tests and tools build a VerbsConfig directly to override them.
// Non-goals: validation of device names against the hardware (verbs_device.cc reports unmatched filters),
// per-peer settings.
#pragma once

#include <cstdint>
#include <string>

#include "zerowire/status.h"

namespace zw::transport::verbs {

struct VerbsConfig {
  std::string hca;             // ZW_IB_HCA: device filter, NCCL syntax ("mlx5_0:1,mlx5_1", ^ excludes, = exact)
  int gid_index = -1;          // ZW_IB_GID_INDEX: GID table index; -1 = automatic (RoCE v2, IPv4-mapped first)
  int timeout = 20;            // ZW_IB_TIMEOUT: ack timeout exponent, 4.096 us * 2^timeout per retry
  int retry_cnt = 7;           // ZW_IB_RETRY_CNT: retransmissions before a write fails (IBV_WC_RETRY_EXC_ERR)
  int traffic_class = 0;       // ZW_IB_TC: GRH traffic class (RoCE DSCP << 2)
  int service_level = 0;       // ZW_IB_SL: InfiniBand service level / RoCE priority
  int qps_per_connection = 1;  // ZW_IB_QPS_PER_CONNECTION: RC QPs per peer (only 1 is implemented)
};

// The process's settings (environment, parsed once).
const VerbsConfig& verbs_config();

// kInvalidArgument naming the knob when a value is outside what the hardware accepts (e.g. ZW_IB_TIMEOUT=40).
Status check_verbs_config(const VerbsConfig& config);

}  // namespace zw::transport::verbs
