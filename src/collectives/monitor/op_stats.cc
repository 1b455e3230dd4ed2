// nccl-tests' size and bus-bandwidth conventions for zerowire's operation descriptions.
#include "collectives/monitor/op_stats.h"

namespace zw::internal::monitor {

uint64_t op_bytes(const OpDesc& d, int n) {
  const uint64_t buffer = d.count * dtype_size(d.dtype);
  switch (d.kind) {
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
      return buffer * static_cast<uint64_t>(n);  // count is per rank
    case OpKind::kAllReduce:
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      return buffer;
    case OpKind::kBarrier:
    case OpKind::kSendRecv:
      return 0;  // a batch's count is its number of transfers
  }
  return 0;
}

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
