// nccl-tests' size and bus-bandwidth conventions for zerowire's operation descriptions.
#include "collectives/monitor/op_stats.h"

namespace zw::internal::monitor {

double bus_factor(OpKind kind, int n) {
  if (n <= 1) return kind == OpKind::kBroadcast || kind == OpKind::kReduce ? 1.0 : 0.0;
  const double share = static_cast<double>(n - 1) / n;
  switch (kind) {
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
      return share;
    case OpKind::kAllReduce:
      return 2 * share;
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      return 1.0;
    case OpKind::kBarrier:
    case OpKind::kSendRecv:
      return 0.0;
  }
  return 0.0;
}

}  // namespace zw::internal::monitor
