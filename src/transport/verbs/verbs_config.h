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

// How the registration cache tells that the memory behind a cached address range changed (verbs_reg_cache.h).
enum class MappingCheck : uint8_t {
  kAuto,     // kPagemap where page frame numbers are readable, else kTrust with one warning
  kPagemap,  // compare the page frames behind the range with those pinned at registration (needs CAP_SYS_ADMIN)
  kTrust,    // reuse on the address alone: the application never frees a buffer it passed to collectives
};

struct RegCacheConfig {
  MappingCheck check = MappingCheck::kAuto;  // ZW_IB_REG_CACHE: auto, pagemap or trust
  size_t max_bytes = size_t{8} << 30;        // ZW_IB_REG_CACHE_BYTES: registered bytes kept for reuse
  size_t max_entries = 256;                  // ZW_IB_REG_CACHE_ENTRIES: registrations kept for reuse
};

struct VerbsConfig {
  std::string hca;             // ZW_IB_HCA: device filter, NCCL syntax ("mlx5_0:1,mlx5_1", ^ excludes, = exact)
  int gid_index = -1;          // ZW_IB_GID_INDEX: GID table index; -1 = automatic (RoCE v2, IPv4-mapped first)
  int timeout = 20;            // ZW_IB_TIMEOUT: ack timeout exponent, 4.096 us * 2^timeout per retry
  int retry_cnt = 7;           // ZW_IB_RETRY_CNT: retransmissions before a write fails (IBV_WC_RETRY_EXC_ERR)
  int traffic_class = 0;       // ZW_IB_TC: GRH traffic class (RoCE DSCP << 2)
  int service_level = 0;       // ZW_IB_SL: InfiniBand service level / RoCE priority
  int qps_per_connection = 1;  // ZW_IB_QPS_PER_CONNECTION: RC QPs per peer; writes >= 64 KiB are striped
  RegCacheConfig reg_cache;    // ZW_IB_REG_CACHE*: the registration cache
  bool use_rdma_cm = false;    // ZW_IB_USE_RDMA_CM: connect the QPs through librdmacm (verbs_rdma_cm.h)
};

inline constexpr int kMaxQpsPerConnection = 64;  // the largest ZW_IB_QPS_PER_CONNECTION

// The process's settings (environment, parsed once).
const VerbsConfig& verbs_config();

// kInvalidArgument naming the knob when a value is outside what the hardware accepts (e.g. ZW_IB_TIMEOUT=40).
Status check_verbs_config(const VerbsConfig& config);

// kUnsupported, saying what to do, when config.use_rdma_cm asks for rdma_cm in a build without librdmacm
// (`built_with_rdmacm` is ZW_HAVE_RDMACM; a parameter so that both answers are tested in any build).
Status check_rdma_cm_support(const VerbsConfig& config, bool built_with_rdmacm);

}  // namespace zw::transport::verbs
