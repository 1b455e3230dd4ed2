// The verbs settings, taken from the knob table (ZW_IB_* rows in common/knobs.cc) and range-checked.
#include "transport/verbs/verbs_config.h"

#include <algorithm>
#include <string>

#include "common/knobs.h"

namespace zw::transport::verbs {

const VerbsConfig& verbs_config() {
  static const VerbsConfig config = [] {
    VerbsConfig c;
    const Knobs& k = knobs();
    c.hca = k.ib_hca;
    c.gid_index = static_cast<int>(k.ib_gid_index);
    c.timeout = static_cast<int>(k.ib_timeout);
    c.retry_cnt = static_cast<int>(k.ib_retry_cnt);
    c.traffic_class = static_cast<int>(k.ib_tc);
    c.service_level = static_cast<int>(k.ib_sl);
    c.qps_per_connection = static_cast<int>(k.ib_qps_per_connection);
    c.reg_cache.check = k.ib_reg_cache == "pagemap" ? MappingCheck::kPagemap
                        : k.ib_reg_cache == "trust" ? MappingCheck::kTrust
                                                    : MappingCheck::kAuto;
    c.reg_cache.max_bytes = static_cast<size_t>(std::max<int64_t>(k.ib_reg_cache_bytes, 0));
    c.reg_cache.max_entries = static_cast<size_t>(std::max<int64_t>(k.ib_reg_cache_entries, 0));
    c.use_rdma_cm = k.ib_use_rdma_cm != 0;
    return c;
  }();
  return config;
}

Status check_verbs_config(const VerbsConfig& c) {
  struct Range {
    const char* name;
    int value, lo, hi;
  };
  const Range ranges[] = {{"ZW_IB_GID_INDEX", c.gid_index, -1, 255},     {"ZW_IB_TIMEOUT", c.timeout, 0, 31},
                          {"ZW_IB_RETRY_CNT", c.retry_cnt, 0, 7},         {"ZW_IB_TC", c.traffic_class, 0, 255},
                          {"ZW_IB_SL", c.service_level, 0, 15},
                          {"ZW_IB_QPS_PER_CONNECTION", c.qps_per_connection, 1, kMaxQpsPerConnection}};
  if (!knobs().ib_reg_cache.empty() && knobs().ib_reg_cache != "auto" && knobs().ib_reg_cache != "pagemap" &&
      knobs().ib_reg_cache != "trust")
    return Status(Code::kInvalidArgument,
                  "ZW_IB_REG_CACHE='" + knobs().ib_reg_cache + "' is not one of auto, pagemap, trust");
  for (const Range& r : ranges)
    if (r.value < r.lo || r.value > r.hi)
      return Status(Code::kInvalidArgument, std::string(r.name) + "=" + std::to_string(r.value) + " is outside " +
                                                std::to_string(r.lo) + ".." + std::to_string(r.hi));
  return Status();
}

Status check_rdma_cm_support(const VerbsConfig& config, bool built_with_rdmacm) {
  if (!config.use_rdma_cm || built_with_rdmacm) return Status();
  return Status(Code::kUnsupported,
                "ZW_IB_USE_RDMA_CM=1 asks for rdma_cm connection setup, but this build of zerowire has no librdmacm "
                "(librdmacm-dev was not found when cmake configured it): install librdmacm-dev and rebuild, or "
                "unset ZW_IB_USE_RDMA_CM to connect the QPs through the bootstrap store");
}

}  // namespace zw::transport::verbs
